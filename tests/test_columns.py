"""The numpy table of the prediction path (``opatlas.columns``), the op counts over it, the
measured collective curves read without pandas, atomic cache writes, and the invariant they
exist for: a warm estimate never imports pandas, LightGBM or scikit-learn."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from opatlas.atomic import atomic_path, write_atomic
from opatlas.columns import as_columns, distinct_rows, factorize, take
from opatlas.estimate.comm import _median_per_size
from opatlas.ops.batch import batch_counts, count_columns
from opatlas.ops.registry import get_op


def test_factorize_numbers_codes_in_order_of_appearance_like_pandas():
    rng = np.random.default_rng(3)
    for values in (rng.integers(0, 7, 500), rng.choice([0.5, np.nan, 2.0], 300),
                   np.array(["b", "a", "b", None, "c", None], dtype=object),
                   rng.integers(0, 50, 30_000)):  # the last one takes the hash path
        codes, n = factorize(values)
        want, uniques = pd.factorize(values, use_na_sentinel=False)
        assert n == len(uniques)
        np.testing.assert_array_equal(codes, want)


def test_as_columns_of_rows_matches_pandas_including_missing_keys():
    rows = [{"mp": 2, "b": 4, "role": "qkv"}, {"mp": 1, "b": 8, "role": "out", "ffn": 1024}]
    cols = as_columns(rows)
    frame = pd.DataFrame(rows)
    assert list(cols) == list(frame.columns)
    for k, v in cols.items():
        np.testing.assert_array_equal(v, frame[k].to_numpy())
    assert cols["role"].dtype == object and cols["mp"].dtype.kind == "i"
    assert np.isnan(cols["ffn"][0]) and cols["ffn"][1] == 1024
    scalars = as_columns({"n_params": np.array([3, 4, 5]), "mp": 1})
    np.testing.assert_array_equal(scalars["mp"], [1, 1, 1])
    np.testing.assert_array_equal(take(scalars, np.array([2, 0]))["n_params"], [5, 3])


def test_distinct_rows_of_a_matrix_and_of_columns_agree():
    rng = np.random.default_rng(5)
    m = rng.integers(0, 3, (400, 3)).astype(float)
    m[::7, 1] = np.nan  # NaN equals NaN for de-duplication
    first, codes = distinct_rows(m)
    np.testing.assert_array_equal(m[first][codes], m)
    assert len(first) == len(pd.DataFrame(m).drop_duplicates())
    f2, c2 = distinct_rows({str(j): m[:, j] for j in range(3)})
    np.testing.assert_array_equal(f2, first)
    np.testing.assert_array_equal(c2, codes)


def test_count_columns_per_group_equals_one_shape_at_a_time():
    """Rows of two dtypes and two linear roles (four groups, interleaved) against the
    catalog's own formulas evaluated on each shape alone."""
    op, fixed = get_op("linear")
    shapes = {"b": np.array([1, 2, 4, 1, 2]), "l": np.array([2048, 4096, 1024, 512, 2048]),
              "dim": np.array([4096, 4096, 1024, 512, 8192]), "mp": np.array([2, 1, 4, 1, 8]),
              "role": np.array(["qkv", "out", "qkv", "out", "out"], dtype=object),
              "dtype": np.array(["fp16", "fp32", "fp16", "fp32", "bf16"], dtype=object)}
    got = count_columns("linear", shapes)
    for i in range(5):
        one = op.resolve({**fixed, **{k: v[i] for k, v in shapes.items()}})
        for name, fn in (("flops", op.flops), ("bytes", op.min_bytes)):
            for pass_, want in fn(one).items():
                assert got[f"{name}_{pass_}"][i] == pytest.approx(float(want), rel=1e-12)
    frame = batch_counts("linear", pd.DataFrame(shapes, index=[10, 11, 12, 13, 14]))
    assert list(frame.index) == [10, 11, 12, 13, 14]
    np.testing.assert_allclose(frame["flops_fwd"].to_numpy(), got["flops_fwd"])
    # by hand, the out projection of row 1: 2·(b·l)·(dim/mp)·dim FLOPs, fp32 bytes of x, W, y
    assert got["flops_fwd"][1] == 2 * (2 * 4096) * 4096 * 4096
    t, d = 2 * 4096, 4096
    assert got["bytes_fwd"][1] == 4 * (t * d + d * d + t * d)


def test_collective_curve_medians_match_pandas(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("shape,nodes,GPUsPerNode,dur(us)\n100,1,2,5\n100,1,2,9\n200,1,2,7\n")
    b.write_text("shape,nodes,GPUsPerNode,dur(us)\n100,1,2,6\n300,1,2,1\n300,1,2,3\n")
    sizes, seconds = _median_per_size([a, b])
    want = pd.concat([pd.read_csv(a), pd.read_csv(b)]).groupby("shape")["dur(us)"].median()
    np.testing.assert_array_equal(sizes, want.index.to_numpy(float))
    np.testing.assert_allclose(seconds, want.to_numpy() * 1e-6)
    assert seconds.tolist() == pytest.approx([6e-6, 7e-6, 2e-6])


def test_atomic_writes_keep_the_old_file_on_error_and_race_safely(tmp_path):
    target = tmp_path / "sub" / "model.bin"
    write_atomic(target, b"old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("writer died")
    assert target.read_bytes() == b"old"
    # many writers at once: each renames its own whole file; no error, no leftovers
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for _ in range(20):
                write_atomic(target, f"writer {i} ".encode() * 1000)
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    text = target.read_text()
    assert text == text[:9] * 1000 and text.startswith("writer ")
    assert [p.name for p in target.parent.iterdir()] == ["model.bin"]


WARM_ESTIMATE = """
import sys
from opatlas.cli import main
try:
    main(["estimate", "llemma_7b_4_2_2_P", "--json"])
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = sorted(m for m in ("pandas", "pyarrow", "lightgbm", "sklearn", "duckdb", "numba")
               if m in sys.modules)
print("HEAVY", heavy, file=sys.stderr)
"""


def test_a_warm_estimate_imports_no_pandas_lightgbm_or_sklearn():
    """The estimate command's speed rests on this: with the models compiled in the cache,
    the whole process is numpy, pydantic and the CLI."""
    run_cli("estimate", "llemma_7b_4_2_2_P", "--json", check=True)  # fits/caches if needed
    proc = subprocess.run([sys.executable, "-c", WARM_ESTIMATE], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parent)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr, proc.stderr
