"""A new user's review of fit, results and the Predictor API: several dtypes in one data set,
impossible shapes, options a recipe ignores, reshard's data, and the op names fit takes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.errors import InvalidShape
from opatlas.predict import Predictor
from opatlas.store import ResultRow, Store

A100 = "NVIDIAA100-SXM4-80GB"
HEADER = "mp,b,l,dim,F_dur(us),B_dur(us)\n"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Models and data indexes in this test's folder, never the user's cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _rows(slower: float = 1.0, n: int | None = None) -> str:
    """linear1 shapes (mp 1-2, b 1-2, l 128-1024, dim 256-1024: 48 rows), times ~ FLOPs."""
    rows = [f"{mp},{b},{l},{d},{slower * b * l * d * d * 6e-9 / mp + 5:.3f},"
            f"{slower * b * l * d * d * 12e-9 / mp + 9:.3f}"
            for mp in (1, 2) for b in (1, 2) for l in (128, 256, 512, 1024)
            for d in (256, 512, 1024)]
    return HEADER + "\n".join(rows[:n]) + "\n"


def _two_dtypes(path: Path, bf16_rows: int | None = None) -> Path:
    """linear1 samples in fp16 and (twice as slow) in bf16, on the A100."""
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{A100}_linear1_fp16.csv").write_text(_rows())
    (path / f"{A100}_linear1_bf16.csv").write_text(_rows(2.0, bf16_rows))
    return path


# 1: several dtypes in one data set ----------------------------------------------------------
def test_fit_json_and_csv_name_each_rows_device_and_dtype(tmp_path, capsys):
    data = _two_dtypes(tmp_path / "d")
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline",
                                    "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert sorted((r["dtype"], r["pass"]) for r in rows) == [
        ("bf16", "bwd"), ("bf16", "fwd"), ("fp16", "bwd"), ("fp16", "fwd")]
    assert {r["device"] for r in rows} == {A100}
    csv = tmp_path / "m.csv"
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline",
                                    "--out", str(csv))
    assert code == 0, err
    assert f"wrote the metrics of 4 (op, pass, dtype) groups to {csv}" in out
    table = pd.read_csv(csv)
    assert sorted(zip(table["dtype"], table["pass"], strict=True)) == [
        ("bf16", "bwd"), ("bf16", "fwd"), ("fp16", "bwd"), ("fp16", "fwd")]


def test_fit_table_has_a_dtype_column_only_where_dtypes_differ(tmp_path, capsys):
    data = _two_dtypes(tmp_path / "d")
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline")
    assert code == 0, err
    header = next(ln for ln in out.splitlines() if " pass " in ln)
    assert header.split()[:3] == ["op", "dtype", "pass"]
    lines = [ln.split() for ln in out.splitlines() if ln.strip().startswith("linear1")]
    assert sorted((ln[1], ln[2]) for ln in lines) == [
        ("bf16", "bwd"), ("bf16", "fwd"), ("fp16", "bwd"), ("fp16", "fwd")]
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline",
                                    "--dtype", "fp16")
    assert code == 0, err
    header = next(ln for ln in out.splitlines() if " pass " in ln)
    assert header.split()[:2] == ["op", "pass"]
    assert f"split random, {A100} fp16" in out  # the title names what the rows share


def test_fit_notes_name_the_dtype_of_a_group_left_out(tmp_path, capsys):
    data = _two_dtypes(tmp_path / "d", bf16_rows=5)
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline",
                                    "--json")
    assert code == 0, err
    assert f"linear1/fwd ({A100} bf16): 5 rows" in err
    assert {r["dtype"] for r in json.loads(out)} == {"fp16"}


def test_fit_device_and_dtype_filter_the_rows_as_predict_does(tmp_path, capsys):
    data = _two_dtypes(tmp_path / "d")
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline",
                                    "--json", "--device", "A100", "--dtype", "bf16")
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["device"], r["dtype"]) for r in rows] == [(A100, "bf16")] * 2
    assert sum(r["n_train"] + r["n_test"] for r in rows) == 2 * 48
    one_error(*cli_in_process(capsys, "fit", "--data", str(data), "--dtype", "fp32")[::2],
              "--dtype fp32", "has no such rows", f"{A100} bf16 (1 ops); {A100} fp16")
    one_error(*cli_in_process(capsys, "fit", "--data", str(data), "--device", "H100")[::2],
              "--device H100", "has no such rows")
    one_error(*cli_in_process(capsys, "fit", "--data", str(data), "--dtype", "fp17")[::2],
              "--dtype 'fp17': unknown dtype")


def _store_two_dtypes(path: Path) -> Path:
    rows = [ResultRow(f"{dtype}{b}", "linear", json.dumps({"b": b, "l": 128, "dim": 256,
                                                           "dtype": dtype}),
                      "fwd", "cpu", "cpu", dtype, "ok", repeats=3, median_ns=1e3 * b,
                      mean_ns=1e3 * b, flops=1.0, min_bytes=1.0)
            for dtype in ("fp32", "bf16") for b in (1, 2)]
    with Store(path) as st:
        st.add_results(rows)
    return path


def test_results_table_shows_the_dtype_when_the_store_holds_several(tmp_path, capsys):
    store = _store_two_dtypes(tmp_path / "two.duckdb")
    code, out, err = cli_in_process(capsys, "results", "--store", str(store))
    assert code == 0, err
    header = next(ln for ln in out.splitlines() if " params " in ln)
    assert [c for c in header.replace("┃", " ").split()][:3] == ["op", "pass", "dtype"]
    shown = sorted(tuple(c.strip() for c in ln.split("│")[1:4])
                   for ln in out.splitlines() if "│ linear" in ln)
    assert shown == [("linear", "fwd", "bf16")] * 2 + [("linear", "fwd", "fp32")] * 2
    one = tmp_path / "one.duckdb"
    with Store(one) as st:
        st.add_results([ResultRow("x", "linear", "{}", "fwd", "cpu", "cpu", "fp32", "ok",
                                  repeats=1, median_ns=1.0)])
    code, out, err = cli_in_process(capsys, "results", "--store", str(one))
    assert code == 0, err
    assert "dtype" not in out


# 2: the Predictor validates shapes as the CLI does ------------------------------------------
@pytest.fixture
def small_predictor(tmp_path) -> Predictor:
    data = tmp_path / "d"
    data.mkdir()
    (data / f"{A100}_linear1_fp16.csv").write_text(_rows())
    return Predictor(data=data, cache_dir=tmp_path / "models")


@pytest.mark.parametrize(("shape", "needle"), [
    ({"b": -4}, "b=-4: b must be a finite number > 0"),
    ({"b": 0}, "b=0: b is a size or a split, it must be > 0"),
    ({"b": 2.5}, "b=2.5: b takes a whole number, not 2.5"),
    ({"l": float("inf")}, "l=inf: l must be a finite number > 0"),
    ({"mp": 3}, "dim % mp != 0"),
])
def test_predictor_refuses_a_shape_the_cli_refuses(small_predictor, shape, needle):
    with pytest.raises(InvalidShape) as exc:
        small_predictor.predict("linear1", {"mp": 2, "b": 4, "l": 512, "dim": 1024, **shape})
    assert needle in str(exc.value)


def test_predictor_names_the_bad_row_of_a_table_and_still_predicts_good_ones(small_predictor):
    good = {"mp": 2, "b": 4, "l": 512, "dim": 1024}
    with pytest.raises(InvalidShape, match=r"row 1 of 3: .*dim % mp != 0"):
        small_predictor.predict("linear1", [good, {**good, "dim": 1023}, good])
    t = small_predictor.predict("linear1", [good, {**good, "b": 2}])
    assert t[0] > t[1] > 0
    # a size whose catalog default is 0 ("not given") may be 0, as the estimator passes it
    assert small_predictor.predict("linear1", {**good, "kv_heads": 0})[0] == t[0]


# 3: reshard-only options under another recipe, and the op models' under reshard -------------
def test_fit_refuses_reshard_options_under_another_recipe(tmp_path, capsys):
    data = _two_dtypes(tmp_path / "d")
    one_error(*cli_in_process(capsys, "fit", "--data", str(data), "--shards", "4",
                              "--group-by", "foo", "--size", "nope", "--time", "bar")[::2],
              "--shards, --group-by, --size, --time apply only to --recipe reshard",
              "this is --recipe hybrid")
    one_error(*cli_in_process(capsys, "fit", "--data", str(data), "--recipe", "gbm",
                              "--size", "tiles")[::2],
              "--size applies only to --recipe reshard (this is --recipe gbm)")
    csv = tmp_path / "r.csv"
    csv.write_text("in_grid,out_grid,group,tiles,y\n")
    one_error(*cli_in_process(capsys, "fit", "--data", str(csv), "--recipe", "reshard",
                              "--op", "linear1", "--dtype", "bf16")[::2],
              "--op, --dtype apply only to the op models", "--recipe reshard fits")


# 4: reshard with the default --data ----------------------------------------------------------
def test_fit_reshard_without_data_says_bundled_is_the_a100_op_data(capsys):
    one_error(*cli_in_process(capsys, "fit", "--recipe", "reshard")[::2],
              "--recipe reshard needs --data STORE|CSV of reshard results",
              "the default --data bundled is the A100 op data")


def test_fit_reshard_refuses_a_folder_of_op_samples(tmp_path, capsys):
    data = _two_dtypes(tmp_path / "d")
    one_error(*cli_in_process(capsys, "fit", "--recipe", "reshard", "--data", str(data))[::2],
              f"--data {data} is a folder", "a store or a CSV of reshard results")


# 6: fit takes the op names predict takes -----------------------------------------------------
def test_fit_op_linear_is_its_default_role_as_in_predict(tmp_path, capsys):
    data = _two_dtypes(tmp_path / "d")
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--op", "linear",
                                    "--dtype", "fp16", "--no-baseline", "--json")
    assert code == 0, err
    assert "--op linear: no role given; fitting its default role qkv (the data's 'linear1'" \
        in err
    assert sorted((r["op"], r["pass"]) for r in json.loads(out)) == [
        ("linear1", "bwd"), ("linear1", "fwd")]


@pytest.mark.parametrize(("asked", "have", "found"), [
    ("flash_attention", {"flash_atten", "gelu"}, "flash_atten"),   # catalog -> ett name
    ("flash_atten", {"flash_attention", "gelu"}, "flash_attention"),  # and back
    ("linear", {"linear1", "linear2"}, "linear1"),  # the default role, as predict
    ("linear", {"linear", "linear1"}, "linear"),  # a name the data holds stays
    ("linear1", {"linear"}, "linear1"),  # left to alias_rows: linear rows of role qkv
])
def test_fit_op_names_map_to_the_datas_as_predict_maps_them(asked, have, found):
    from opatlas.cli.fit_cmd import _data_op_names

    names, notes = _data_op_names([asked], have)
    assert names == [found]
    assert bool(notes) == (found != asked)


def test_fit_op_linear_is_not_another_roles_linear(tmp_path, capsys):
    """linear's role defaults to qkv: data holding only linear3 (ffn_up) has no linear."""
    from opatlas.cli.fit_cmd import _data_op_names

    assert _data_op_names(["linear"], {"linear3", "gelu"}) == (["linear"], [])


def test_predict_checks_the_shape_before_fitting_on_a_cold_cache(tmp_path):
    """A shape missing parameters is refused from the data's index alone: no model fitted,
    nothing written to the (empty) cache, the one error line first and alone."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "opatlas", "predict", "linear1", "--shape",
                           "mp=2"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "opatlas: error: op 'linear1' takes shape parameters b, dim, l, mp (optional: ffn, "
        "vocab, h, kv_heads, head_dim); missing b, dim, l"]
    models = tmp_path / "cache" / "opatlas" / "models"
    assert not models.exists() or not any(p.is_file() for p in models.rglob("*"))


def test_saved_models_of_another_recipe_revision_are_refused(tmp_path):
    """A saved model corrects the roofline base of the recipes that fitted it: after the base
    changed (a new revision), loading it would give wrong times, so it is refused, saying how
    to refit."""
    import joblib

    from opatlas.errors import OpatlasError
    from opatlas.fit.recipes import RECIPE_REVISION
    from opatlas.fit.registry import ModelRegistry

    reg = ModelRegistry(tmp_path)
    path = reg.path("A100", "fp16", "hybrid", "gelu", "fwd")
    path.parent.mkdir(parents=True)
    joblib.dump({"model": "m", "meta": {"data_hash": f"ab:r{RECIPE_REVISION}"}}, path)
    assert reg.load_saved("A100", "fp16", "gelu", "fwd")[0] == "m"
    joblib.dump({"model": "m", "meta": {"data_hash": "ab:r4"}}, path)
    with pytest.raises(OpatlasError, match=f"revision 4, this opatlas's are revision "
                                           f"{RECIPE_REVISION}.*opatlas fit"):
        reg.load_saved("A100", "fp16", "gelu", "fwd")
    joblib.dump({"model": "m", "meta": {"data_hash": "ab"}}, path)  # no revision at all
    with pytest.raises(OpatlasError, match=r"revision \(unknown\), this opatlas's"):
        reg.load_saved("A100", "fp16", "gelu", "fwd")


def test_fit_reshard_shards_without_out_is_refused(capsys, tmp_path):
    """--shards splits what --out writes: without --out it would do nothing, silently."""
    data = tmp_path / "r.csv"
    data.write_text("in_grid,out_grid,size,y\n")
    code, _, err = cli_in_process(capsys, "fit", "--recipe", "reshard", "--data", str(data),
                                  "--shards", "12")
    one_error(code, err, "--shards 12 splits the models CSV that --out writes")
