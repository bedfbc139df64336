"""``opatlas predict``: defaults filled in are range-checked only where they change the op's
counts; values beyond int64 refused; the floor said for every pass and in ``--json``.
``opatlas fit --split extrapolate`` refuses a column of text."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.errors import InvalidShape, OpatlasError
from opatlas.fit.splits import iter_splits
from opatlas.predict import Predictor
from opatlas.predict.predictor import MAX_VALUE, check_values, number_problem

H100 = "H100-SXM5-80GB"
QKV = {"role": "qkv", "mp": 2, "b": 4, "l": 4096, "dim": 4096}
DEFAULTS = {"h": 0, "kv_heads": 0, "ffn": 0, "vocab": 50257}


def test_defaults_that_leave_the_counts_alone_are_not_out_of_range():
    pred = Predictor(device=H100, data="h100")
    row = {**QKV, **DEFAULTS}
    # given all (the old reading): the catalog's 0s lie below the measured ranges
    assert [t.split("=")[0] for t in pred.outside_range("linear", row)] == \
        ["h", "kv_heads", "ffn"]
    # a qkv linear's counts never read ffn, nor h without kv_heads: nothing to say
    assert pred.outside_range("linear", row, given=list(QKV)) == []
    # given by the user, a value outside is said, whether or not it changes the counts
    assert pred.outside_range("linear", row, given=[*QKV, "ffn"]) == \
        ["ffn=0 (measured 8,192 to 28,672)"]
    # with grouped-query kv_heads given, the default h=0 sizes the qkv output: it counts
    gqa = {**row, "kv_heads": 8}
    assert pred.outside_range("linear", gqa, given=[*QKV, "kv_heads"]) == \
        ["h=0 (measured 24 to 64)"]


def test_predict_strict_accepts_a_shape_the_user_gave_inside_the_data(capsys):
    code, out, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                    "mp=2,b=4,l=4096,dim=4096", "--data", "h100", "--strict",
                                    "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["defaults"]["ffn"] == 0 and got["notes"] == []
    assert got["us"]["fwd"] > 0 and got["us"]["bwd"] > got["us"]["fwd"]
    # ffn changes nothing a qkv linear reads: the same times at a measured value
    code, out2, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                     "mp=2,b=4,l=4096,dim=4096,ffn=8192", "--data", "h100",
                                     "--strict", "--json")
    assert code == 0, err
    assert json.loads(out2)["us"] == got["us"]


def test_values_beyond_int64_are_refused():
    huge = "99999999999999999999999"
    assert number_problem("dim", float(huge), True, shown=huge) == \
        (f"dim must be at most {MAX_VALUE:,} (2**63 - 1, the largest whole number the "
         f"counts hold), not {huge}")
    assert number_problem("dim", float(MAX_VALUE // 2), True) is None
    table = {"mp": np.array([2, 2]), "b": np.array([4, 4]), "l": np.array([8, 8]),
             "dim": np.array([64.0, 1e23])}
    with pytest.raises(InvalidShape, match=r"row 1 of 2: dim=1e\+23: dim must be at most"):
        check_values("linear1", table)


def test_predict_cli_refuses_a_huge_value_in_one_line(capsys):
    code, out, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                    "mp=2,b=4,l=4096,dim=99999999999999999999999")
    one_error(code, err, "dim", "99999999999999999999999", "at most")
    assert out == "" and "invalid value" not in err


def test_the_floor_names_every_pass_and_reaches_json(capsys):
    code, out, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                    "mp=2,b=4,l=1,dim=8", "--json")
    assert code == 0, err
    got = json.loads(out)
    floors = [ln for ln in err.splitlines() if "floored there" in ln]
    assert len(floors) == 1 and "(fwd, bwd)" in floors[0], err
    assert got["us"]["fwd"] == got["us"]["bwd"]  # both at the device's floor
    floored = [n for n in got["notes"] if "floored there" in n]
    assert len(floored) == 1 and "(fwd, bwd)" in floored[0]
    assert any("dim=8 (measured" in n for n in got["notes"])  # the extrapolation too


def test_predict_passes_floors_each_pass_and_says_it_once():
    pred = Predictor()
    with pytest.warns(UserWarning, match=r"\(fwd, bwd\)") as said:
        got = pred.predict_passes("linear1", [{"mp": 2, "b": 4, "l": 1, "dim": 8}],
                                  ["fwd", "bwd"])
    assert len([w for w in said if "floored" in str(w.message)]) == 1
    floor = pred._floor_us("linear1", "fwd", "A100-SXM4-80GB", "fp16")
    assert got["fwd"].tolist() == got["bwd"].tolist() == [floor]
    assert pred.predict("linear1", {"mp": 2, "b": 4, "l": 1, "dim": 8}).tolist() == [floor]


def _frame(roles: list) -> pd.DataFrame:
    return pd.DataFrame({"b": np.arange(len(roles)), "role": roles})


def test_extrapolate_refuses_a_text_column():
    df = _frame(["qkv", "out", "ffn_up", "vocab", "qkv", "out"])
    with pytest.raises(OpatlasError) as exc:
        list(iter_splits(df, "extrapolate:role:0.3"))
    text = str(exc.value)
    assert "column 'role' is not numeric" in text and "group:role" in text
    assert "\n" not in text


def test_extrapolate_sorts_a_column_of_numbers_as_numbers():
    # an object column of numbers (a mixed-type read): 10 is the largest, not "9"
    df = pd.DataFrame({"dim": pd.Series([9, 10, 2, 10, 9, 2], dtype=object)})
    ((train, test),) = iter_splits(df, "extrapolate:dim:0.3")
    assert test.tolist() == [1, 3] and train.tolist() == [0, 2, 4, 5]
