"""A new user's review of fit, predict and the estimate-train-time reader/exporter (round 1):
too few rows, group splits, bad cells, saved models, extrapolation, progress, repeated
shapes, failed rows on export."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.errors import OpatlasError, StoreError
from opatlas.fit.data import load_op_data
from opatlas.store import ResultRow, Store
from opatlas.store.ett import export_ett, export_ett_report, import_ett_samples, read_sample_file

A100 = "NVIDIAA100-SXM4-80GB"
HEADER = "mp,b,l,dim,F_dur(us),B_dur(us)\n"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Models and data indexes in this test's folder, never the user's cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _linear_rows(n: int | None = None) -> list[str]:
    """linear1 shapes (mp 1, b 1-2, l 128-1024, dim 256-1024: 24 rows), times ~ their FLOPs."""
    rows = [f"1,{b},{l},{d},{b * l * d * d * 6e-9 + 5:.3f},{b * l * d * d * 12e-9 + 9:.3f}"
            for b in (1, 2) for l in (128, 256, 512, 1024) for d in (256, 512, 1024)]
    return rows[:n]


def _folder(path: Path, rows: list[str], op: str = "linear1", header: str = HEADER) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{A100}_{op}_fp16.csv").write_text(header + "\n".join(rows) + "\n")
    return path


# 1: too few rows --------------------------------------------------------------------------
def test_predict_refuses_fewer_rows_than_fit_evaluates(tmp_path, capsys):
    for n in (1, 3):
        data = _folder(tmp_path / f"d{n}", _linear_rows(n))
        one_error(*cli_in_process(capsys, "predict", "linear1", "--shape",
                                  "mp=1,b=1,l=128,dim=256", "--data", str(data))[::2],
                  "op 'linear1' fwd", f"holds {n} fp16 row(s)", "at least 10")


@pytest.mark.parametrize(("split", "needle"), [
    ("random:0.95", "linear1/fwd: trains on 1 of its 12 rows"),
    ("group:mp", "linear1/fwd: trains on 0 of its 12 rows"),  # one mp value: nothing left
    ("extrapolate:mp:0.2", "linear1/fwd: mp has too few distinct values"),
])
def test_fit_refuses_a_split_leaving_too_few_rows_in_one_line(tmp_path, capsys, split,
                                                                needle):
    data = _folder(tmp_path / "d", _linear_rows(12))
    one_error(*cli_in_process(capsys, "fit", "--data", str(data), "--split", split,
                              "--no-baseline")[::2], needle, "at least 10 rows")


# 2: group:COL with ops lacking COL ---------------------------------------------------------
def test_group_split_skips_ops_without_the_column(tmp_path, capsys):
    data = _folder(tmp_path / "d", [r.replace("1,", "2,", 1) for r in _linear_rows()]
                   + _linear_rows())  # mp 1 and 2: two groups of 24
    rows = [f"{b},{l},{d},{b * l * d * 1e-6 + 2:.3f},{b * l * d * 2e-6 + 3:.3f}"
            for b in (1, 2) for l in (128, 256, 512, 1024) for d in (256, 512, 1024)]
    _folder(data, rows, "res_add", "b,l,dim,F_dur(us),B_dur(us)\n")
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--split", "group:mp",
                                    "--no-baseline", "--json")
    assert code == 0, err
    assert sorted((r["op"], r["pass"], r["n_test"]) for r in json.loads(out)) == [
        ("linear1", "bwd", 48), ("linear1", "fwd", 48)]
    assert "not evaluated: res_add/bwd: no mp; res_add/fwd: no mp" in err
    one_error(*cli_in_process(capsys, "fit", "--data", str(data), "--split", "group:h")[::2],
              "no op here has a parameter 'h'", "b, dim, l, mp")


# 3: bad cells in estimate-train-time CSVs --------------------------------------------------
@pytest.mark.parametrize(("row", "needles"), [
    ("1,2,256,512,x,5", ["line 3", "column 'F_dur(us)'", "'x' is not a number"]),
    ("1,2,256,512,-5,5", ["line 3", "column 'F_dur(us)'", "'-5' is not a time"]),
    ("1,2,256,512,4,0", ["line 3", "column 'B_dur(us)'", "'0' is not a time"]),
    ("1,2,256,abc,4,5", ["line 3", "column 'dim'", "'abc' is not a number"]),
    ("1,2,,512,4,5", ["line 3", "column 'l'", "empty"]),
    ("1,2,256,4,5", ["line 3", "5 cells, the header has 6 columns"]),
])
def test_a_bad_cell_is_named_by_file_line_and_column(tmp_path, capsys, row, needles):
    data = _folder(tmp_path / "d", ["1,2,128,256,5,9", row])
    path = data / f"{A100}_linear1_fp16.csv"
    with pytest.raises(StoreError) as err:
        read_sample_file(path)
    assert str(err.value).startswith(f"{path}, line 3")
    assert all(n in str(err.value) for n in needles), err.value
    store = tmp_path / "s.duckdb"
    one_error(*cli_in_process(capsys, "import", "ett-samples", str(data), "--store",
                              str(store))[::2], str(path), *needles)
    one_error(*cli_in_process(capsys, "fit", "--data", str(data))[::2], str(path), *needles)


def test_a_file_without_time_columns_is_named(tmp_path, capsys):
    data = _folder(tmp_path / "d", ["1,2,128,256"], header="mp,b,l,dim\n")
    one_error(*cli_in_process(capsys, "import", "ett-samples", str(data), "--store",
                              str(tmp_path / "s.duckdb"))[::2],
              f"{A100}_linear1_fp16.csv: no time column", "its columns are mp, b, l, dim")


def test_named_values_and_unsampled_cells_still_read(tmp_path):
    path = _folder(tmp_path / "d", ["qkv,1,2048,256,8960.274,", "out,1,2048,256,7.5,9"],
                   "linear", "role,b,l,dim,F_dur(us),B_dur(us)\n") / f"{A100}_linear_fp16.csv"
    rows = read_sample_file(path, counts=False)
    assert [(json.loads(r.params_json)["role"], r.pass_, r.median_ns) for r in rows] == [
        ("qkv", "fwd", 8960274.0), ("out", "fwd", 7500.0), ("out", "bwd", 9000.0)]
    assert json.loads(rows[0].params_json)["l"] == 2048  # numbers stay numbers


# 4: predict --models, and --data as its help says -----------------------------------------
def test_predict_uses_the_models_fit_saved_and_takes_one_csv(tmp_path, capsys):
    data = _folder(tmp_path / "d", _linear_rows())
    models = tmp_path / "models"
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline",
                                    "--out", str(models))
    assert code == 0, err
    shape = ["linear1", "--shape", "mp=1,b=2,l=512,dim=512", "--json"]
    code, out, err = cli_in_process(capsys, "predict", *shape, "--models", str(models))
    assert code == 0, err
    saved = json.loads(out)["us"]
    code, out, err = cli_in_process(capsys, "predict", *shape, "--data",
                                    str(data / f"{A100}_linear1_fp16.csv"))
    assert code == 0, err
    assert json.loads(out)["us"] == pytest.approx(saved) and set(saved) == {"fwd", "bwd"}
    one_error(*cli_in_process(capsys, "predict", *shape, "--models", str(models),
                              "--device", "H100")[::2], "no model saved for device 'H100'")
    one_error(*cli_in_process(capsys, "predict", *shape, "--data", str(tmp_path / "x.csv"))
              [::2], "no such store file or folder")


# 5: predictions beyond the measured range ---------------------------------------------------
def test_a_shape_outside_the_data_is_said_and_refused_under_strict(tmp_path, capsys):
    data = str(_folder(tmp_path / "d", _linear_rows()))
    far = ["linear1", "--shape", "mp=1,b=2,l=65536,dim=512", "--data", data]
    code, _, err = cli_in_process(capsys, "predict", *far, "--recipe", "gbm")
    assert code == 0, err
    assert ("linear1: l=65,536 (measured 128 to 1,024) outside the data the model was fitted "
            "on: the gbm recipe's trees cannot extrapolate") in err
    code, _, err = cli_in_process(capsys, "predict", *far)
    assert code == 0 and "the hybrid model scales its roofline base" in err, err
    one_error(*cli_in_process(capsys, "predict", *far, "--strict")[::2],
              "l=65,536 (measured 128 to 1,024)", "--strict refuses to extrapolate")
    code, _, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                  "mp=1,b=2,l=512,dim=512", "--data", data, "--strict")
    assert code == 0 and "outside" not in err, err


# 6: progress on long fits ---------------------------------------------------------------
def test_fit_and_first_predict_show_progress(tmp_path, capsys):
    data = str(_folder(tmp_path / "d", _linear_rows()))
    code, _, err = cli_in_process(capsys, "fit", "--data", data, "--no-baseline")
    assert code == 0 and "fit hybrid | 2/2=100.00%" in err, err
    shape = ["linear1", "--shape", "mp=1,b=2,l=512,dim=512", "--data", data]
    code, _, err = cli_in_process(capsys, "predict", *shape)
    assert code == 0 and "fitting linear1's fwd, bwd model(s) on first use" in err, err
    assert "fitting linear1 | 2/2=100.00%" in err
    code, _, err = cli_in_process(capsys, "predict", *shape)
    assert code == 0 and "fitting" not in err, err  # cached: nothing to show


# 7: a folder and its import give the same rows ---------------------------------------------
def test_fit_reads_repeated_shapes_as_the_import_stores_them(tmp_path):
    rows = _linear_rows()
    data = _folder(tmp_path / "d", [*rows, rows[0].replace(",5.", ",7."), rows[3]])
    folder = load_op_data(data)
    with Store(tmp_path / "s.duckdb") as st:
        import_ett_samples(st, data)
    stored = load_op_data(tmp_path / "s.duckdb")
    key = ["op", "pass", "params_json"]
    assert len(folder) == len(stored) == 2 * 24
    both = folder.merge(stored, on=key, suffixes=("", "_store"))
    assert len(both) == 48 and (both["y_us"] - both["y_us_store"]).abs().max() < 1e-9
    assert not folder.duplicated(key).any()


# 8: failed rows on export -------------------------------------------------------------------
def _store(path: Path, statuses: list[str]) -> Path:
    rows = [ResultRow(f"v{i}", "gelu", json.dumps({"b": 1, "l": 128 * (i + 1), "dim": 256,
                                                  "dtype": "fp32"}), "fwd", "cpu", "MYCPU",
                      "fp32", status, repeats=3, median_ns=1e3 if status == "ok" else None)
            for i, status in enumerate(statuses)]
    with Store(path) as st:
        st.add_results(rows)
    return path


def test_export_says_the_failed_rows_it_leaves_out(tmp_path, capsys):
    mixed = _store(tmp_path / "m.duckdb", ["ok", "timeout", "error", "timeout"])
    with Store(mixed, read_only=True) as st:
        done = export_ett_report(st, tmp_path / "out")
        assert done.left_out == {"error": 1, "timeout": 2}
        assert [p.name for p in done.paths] == ["MYCPU_gelu_fp32.csv"]
        export_ett(st, tmp_path / "out2")
    assert len(pd.read_csv(tmp_path / "out" / "MYCPU_gelu_fp32.csv")) == 1
    assert ("opatlas: note: left out 3 result row(s) that did not succeed (error 1, "
            "timeout 2)") in capsys.readouterr().err
    failed = _store(tmp_path / "f.duckdb", ["timeout", "timeout"])
    with Store(failed, read_only=True) as st, pytest.raises(OpatlasError) as err:
        export_ett(st, tmp_path / "none")
    assert "no ok result to write" in str(err.value) and "(timeout 2)" in str(err.value)
    assert not (tmp_path / "none").exists()


def test_an_estimate_says_an_op_has_too_few_rows_not_no_data():
    """An op measured on fewer rows than a model is fitted on falls back to the roofline
    with that reason, not "no measured data"."""
    import warnings

    import pandas as pd

    from opatlas.devices import get_device
    from opatlas.errors import OpatlasError, TooFewRows
    from opatlas.estimate.optimes import DataTimes, RooflineFallbackWarning, RooflineTimes

    class Thin:  # the Predictor's two refusals, without data to read
        device, data_source = "A100", "d"

        def predict(self, op, shapes, pass_, dtype=None):
            raise (TooFewRows if op == "gelu" else OpatlasError)(op)

    times = DataTimes.__new__(DataTimes)
    RooflineTimes.__init__(times, get_device("A100"), "fp16", 1.0, 1.0)
    times.predictor, times.strict, times.fallbacks, times.too_few = Thin(), False, set(), set()
    times.by_roofline, times.asked, times.references = frozenset(), set(), {}
    times.state_dtype = set()
    shapes = pd.DataFrame({"b": [1], "l": [512], "dim": [1024]})
    roof = RooflineTimes(get_device("A100"), "fp16", 1.0, 1.0)("gelu", shapes, "bwd")
    assert times("gelu", shapes, "bwd") == pytest.approx(roof)
    times("res_add", shapes, "fwd")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        notes = times.fallback_notes()
    assert notes == ["op gelu/bwd has fewer than 10 measured rows; roofline used",
                     "op res_add/fwd has no measured data; roofline used"]
    [w] = [w for w in seen if issubclass(w.category, RooflineFallbackWarning)]
    assert str(w.message).startswith("no measured data for res_add/fwd on A100 fp16 in d; "
                                     "fewer than 10 measured rows for gelu/bwd on A100 fp16")
    times.strict = True
    with pytest.raises(OpatlasError, match="strict: no measured data for res_add/fwd"):
        times.fallback_notes()


# review of the fixes ----------------------------------------------------------------------
def test_analyze_finds_the_models_fit_saved_for_a_store_under_the_gpus_own_name(tmp_path,
                                                                                 capsys):
    """fit --out files models under the catalog name (A100-SXM4-80GB); a store holds the name
    the GPU reports (NVIDIAA100-SXM4-80GB): analyze --models must find them."""
    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        import_ett_samples(st, _folder(tmp_path / "d", _linear_rows()))
    models = tmp_path / "models"
    code, _, err = cli_in_process(capsys, "fit", "--data", str(store), "--no-baseline",
                                  "--out", str(models))
    assert code == 0, err
    code, out, err = cli_in_process(capsys, "analyze", str(store), "--models", str(models),
                                    "--json", "--strict")
    assert code == 0, err
    doc = json.loads(out)
    assert {r["predicted_by"] for r in doc["rows"]} == {"saved"}


def test_fit_out_skips_a_thin_dtype_of_an_evaluated_op_and_counts_what_it_saved(tmp_path,
                                                                                capsys):
    data = _folder(tmp_path / "d", _linear_rows())
    (data / f"{A100}_linear1_bf16.csv").write_text(HEADER + "\n".join(_linear_rows(5)) + "\n")
    models = tmp_path / "models"
    code, out, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline",
                                    "--out", str(models))
    assert code == 0, err
    assert ("not saved, fewer than 10 rows to fit on: linear1 fwd (NVIDIAA100-SXM4-80GB bf16), "
            "linear1 bwd (NVIDIAA100-SXM4-80GB bf16)") in err
    assert f"saved 2 models under {models}" in out + err
    assert len(list(models.rglob("*.joblib"))) == 2


def test_predict_leaves_out_a_thin_pass_and_predicts_the_other(tmp_path, capsys):
    rows = _linear_rows()
    thin = [r.rsplit(",", 1)[0] + "," for r in rows[5:]]  # bwd measured on 5 shapes only
    data = _folder(tmp_path / "d", rows[:5] + thin)
    code, out, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                    "mp=1,b=1,l=256,dim=512", "--data", str(data), "--json")
    assert code == 0, err
    assert set(json.loads(out)["us"]) == {"fwd"}
    assert "op 'linear1' bwd" in err and "holds 5 fp16 row(s)" in err and "left out" in err


def test_fit_op_alias_finds_the_rows_filed_under_its_op(tmp_path, capsys):
    """A CPU store files linear rows as 'linear' with a role; fit --op linear1 (a linear of
    role qkv) evaluates those rows, as results --op linear1 shows them, and no others."""
    rows = []
    for i, (role, b, l, d) in enumerate((r, b, l, d) for r in ("qkv", "ffn_up", None)
                                        for b in (1, 2) for l in (128, 256, 512, 1024)
                                        for d in (256, 512)):
        params = {"b": b, "l": l, "dim": d, "dtype": "fp16", **({"role": role} if role else {})}
        us = b * l * d * d * 6e-9 * (4 if role == "ffn_up" else 3) + 5
        rows.append(ResultRow(f"v{i}", "linear", json.dumps(params), "fwd", "cpu", "cpu",
                              "fp16", "ok", repeats=3, median_ns=us * 1e3, flops=1.0,
                              min_bytes=1.0))
    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.add_results(rows)
    code, out, err = cli_in_process(capsys, "fit", "--data", str(store), "--op", "linear1",
                                    "--no-baseline", "--json")
    assert code == 0, err
    assert "--op linear1: the data files it as 'linear' (its 32 rows with role=qkv)" in err
    [ev] = json.loads(out)
    assert ev["op"] == "linear1" and ev["n_test"] + ev["n_train"] == 32  # qkv and unset roles
