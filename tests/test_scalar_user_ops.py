"""A user op whose formulas take one shape at a time (``float(p["n"])``) still gets its counts
for a whole table of shapes, so the models of its data use them (the hybrid recipe's roofline
feature), instead of silently losing them."""

from __future__ import annotations

import numpy as np
import pytest

from opatlas.devices import find_device
from opatlas.fit.features import feature_columns
from opatlas.ops import Op, register_op
from opatlas.ops.batch import count_columns
from opatlas.ops.registry import _OPS


@pytest.fixture
def scalar_op():
    class ScalarOnly(Op):
        name = "test_scalar_only_scale"
        params = ("n",)
        defaults = {"k": 3}

        def flops(self, p):
            return {"fwd": float(p["n"]) * p["k"]}  # float() of an array of 2+ raises

        def min_bytes(self, p):
            return {"fwd": 8.0 * float(p["n"])}

    register_op(ScalarOnly)
    yield ScalarOnly.name
    _OPS.pop(ScalarOnly.name, None)


def test_counts_of_a_scalar_only_op_are_evaluated_row_by_row(scalar_op):
    c = count_columns(scalar_op, {"n": np.array([16, 32, 100]), "dtype": np.array(["fp32"] * 3)})
    np.testing.assert_array_equal(c["flops_fwd"], [48.0, 96.0, 300.0])
    np.testing.assert_array_equal(c["bytes_fwd"], [128.0, 256.0, 800.0])


def test_the_fit_features_of_a_scalar_only_op_keep_its_roofline(scalar_op):
    a100 = find_device("A100-SXM4-80GB")
    cols = feature_columns(scalar_op, "fwd", {"n": np.array([1000, 2000])}, a100, "fp16")
    expected = np.maximum(np.array([3000.0, 6000.0]) / a100.peak("fp16"),
                          np.array([8000.0, 16000.0]) / a100.bandwidth) * 1e6
    np.testing.assert_allclose(cols["roofline_us"], expected)


def test_a_formula_that_fails_for_one_row_still_fails(scalar_op):
    with pytest.raises((TypeError, ValueError)):
        count_columns(scalar_op, {"n": np.array(["x", "y"])})
