"""fit's table shows the split as typed: Rich would read ':b:' in extrapolate:b:0.2 as an
emoji code; predict takes the dtype as --dtype, not in --shape (it was taken and ignored)."""

from __future__ import annotations

import json
import warnings

import pandas as pd
import pytest

from conftest import cli_in_process, one_error


def test_the_split_in_the_title_is_shown_as_typed(capsys):
    code, out, err = cli_in_process(capsys, "fit", "--op", "linear1", "--split",
                                    "extrapolate:b:0.2", "--no-baseline")
    assert code == 0, err
    assert "split extrapolate:b:0.2" in out


def test_a_dtype_in_the_shape_points_to_the_dtype_option(capsys):
    code, _, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                  "mp=2,b=4,l=4096,dim=4096,dtype=bf16")
    one_error(code, err, "--shape 'dtype=bf16'", "not a shape parameter", "--dtype bf16")


def _linear_store(path):
    """linear rows of two roles on "My CPU", fp32, at 50 GFLOP/s."""
    import itertools
    import json

    from opatlas.ops.batch import batch_counts
    from opatlas.store import Store
    from opatlas.store.db import ResultRow

    shapes = [{"role": role, "mp": 1, "b": b, "l": l, "dim": d} for role, b, l, d in
              itertools.product(("qkv", "ffn_up"), (1, 2), (256, 512, 1024), (512, 1024))]
    rows = []
    for i, s in enumerate(shapes):
        c = batch_counts("linear", pd.DataFrame([{**s, "dtype": "fp32"}])).iloc[0]
        rows.append(ResultRow(f"v{i}", "linear", json.dumps({**s, "dtype": "fp32"}), "fwd",
                              "cpu", "My CPU", "fp32", "ok", repeats=3,
                              median_ns=c["flops_fwd"] / 50e9 * 1e9,
                              flops=float(c["flops_fwd"]), min_bytes=float(c["bytes_fwd"])))
    with Store(path) as st:
        st.add_results(rows)
    return path


def test_an_alias_is_predicted_from_the_op_a_store_files_it_under(tmp_path):
    """A store files linear1's rows as linear with role=qkv (as opatlas run records them):
    predict linear1 takes that model, with the role the alias fixes."""
    from opatlas.predict import Predictor

    _linear_store(tmp_path / "s.duckdb")
    p = Predictor(device="My CPU", dtype="fp32", data=tmp_path / "s.duckdb",
                  cache_dir=tmp_path / "cache")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = {"mp": 1, "b": 2, "l": 512, "dim": 1024}
        qkv = p.predict("linear1", one)[0]
        ffn = p.predict("linear3", one)[0]
        assert qkv == pytest.approx(p.predict("linear", {**one, "role": "qkv"})[0])
    # at 50 GFLOP/s: 2·1024 tokens·1024·3072 (qkv) and ·4096 (ffn_up) FLOPs
    assert qkv == pytest.approx(2 * 1024 * 1024 * 3072 / 50e9 * 1e6, rel=0.1)
    assert ffn == pytest.approx(2 * 1024 * 1024 * 4096 / 50e9 * 1e6, rel=0.1)


def test_a_size_whose_default_is_zero_takes_zero_as_not_given(capsys):
    """opatlas ops shows ffn=0, kv_heads=0, head_dim=0 as defaults ("derived"): typing them
    gives the default's answer, not a refusal; a real size of 0 is still refused."""
    code, base, err = cli_in_process(capsys, "predict", "linear3", "--shape",
                                     "mp=2,b=4,l=4096,dim=4096")
    assert code == 0, err
    for given in ("ffn=0", "kv_heads=0", "head_dim=0"):
        code, out, err = cli_in_process(capsys, "predict", "linear3", "--shape",
                                        f"mp=2,b=4,l=4096,dim=4096,{given}")
        assert code == 0 and out == base, err
    code, _, err = cli_in_process(capsys, "predict", "linear3", "--shape", "mp=2,b=0,l=4,dim=8")
    one_error(code, err, "b is a size or a split, it must be > 0")


def test_predict_takes_the_one_device_and_dtype_the_data_holds(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    store = _linear_store(tmp_path / "s.duckdb")
    code, out, err = cli_in_process(capsys, "predict", "linear1", "--data", str(store),
                                    "--shape", "mp=1,b=2,l=512,dim=1024", "--json")
    assert code == 0, err
    assert "the data holds one device and dtype: MyCPU fp32" in err
    doc = json.loads(out)
    assert (doc["device"], doc["dtype"]) == ("MyCPU", "fp32")
    assert doc["us"]["fwd"] == pytest.approx(2 * 1024 * 1024 * 3072 / 50e9 * 1e6, rel=0.1)
    # a dtype the data lacks is still an error naming what it holds
    code, _, err = cli_in_process(capsys, "predict", "linear1", "--data", str(store),
                                  "--dtype", "bf16", "--shape", "mp=1,b=2,l=512,dim=1024")
    one_error(code, err, "no bf16 samples", "it holds")
