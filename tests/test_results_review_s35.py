"""Review s35 of ``opatlas run`` and ``opatlas results``: exports keep integer parameters
integers in a store of several ops, an import says the rows it did not add (and those that
measured other values), the table's spread is a share of the median it sits next to, the
table is ordered by op, pass and parameters and written unwrapped, and a resumed run says
when the stored rows were measured with other settings."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from conftest import cli_in_process, write_spec
from opatlas.store import Store
from opatlas.store.db import ResultRow, expand_param_columns


def _row(op: str, params: dict[str, Any], *, vid: str | None = None, pass_: str = "fwd",
         median: float = 2000.0, mean: float = 2000.0, std: float = 20.0,
         **more: Any) -> ResultRow:
    return ResultRow(vid or f"{op}-{json.dumps(params, sort_keys=True)}", op,
                     json.dumps(params), pass_, "cpu", "X", "fp32", "ok", repeats=3,
                     mean_ns=mean, std_ns=std, median_ns=median, min_ns=min(median, mean) / 2,
                     max_ns=4 * max(median, mean), flops=4000.0, **more)


def _store(path: Path, rows: list[ResultRow]) -> Path:
    with Store(path) as st:
        st.add_results(rows)
    return path


def _two_ops(tmp_path: Path) -> Path:
    return _store(tmp_path / "mix.duckdb", [
        _row("linear", {"role": "qkv", "mp": 1, "dim": 512, "dtype": "fp32"}),
        _row("linear", {"role": "qkv", "mp": 2, "dim": 1024, "dtype": "fp32"}),
        _row("softmax", {"mp": 1, "h": 8, "scale": 0.5, "dtype": "fp32"}),
    ])


# -- 1: integer parameters stay integers when some rows lack them -------------------------------

def test_csv_and_json_exports_keep_integer_parameters_of_a_store_of_two_ops(capsys, tmp_path):
    store = _two_ops(tmp_path)
    code, out, _ = cli_in_process(capsys, "results", "--store", str(store), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))  # the text as written, not re-typed
    assert sorted(r["dim"] for r in rows) == ["", "1024", "512"]
    assert sorted(r["h"] for r in rows) == ["", "", "8"]
    assert [r["scale"] for r in rows if r["op"] == "softmax"] == ["0.5"]
    code, out, _ = cli_in_process(capsys, "results", "--store", str(store), "--format", "json")
    records = json.loads(out)
    dims = [r["dim"] for r in records if r["op"] == "linear"]
    assert sorted(dims) == [512, 1024] and all(type(d) is int for d in dims), dims
    hs = [r["h"] for r in records if r["op"] == "softmax"]
    assert hs == [8] and type(hs[0]) is int
    assert [r["scale"] for r in records if r["op"] == "softmax"] == [0.5]


def test_parquet_export_types_integer_parameters_as_integers(capsys, tmp_path):
    store = _two_ops(tmp_path)
    out = tmp_path / "r.parquet"
    code, _, err = cli_in_process(capsys, "results", "--store", str(store), "--out", str(out))
    assert code == 0, err
    df = pd.read_parquet(out)
    assert str(df["dim"].dtype) == "Int64" and str(df["h"].dtype) == "Int64"
    assert str(df["mp"].dtype) == "int64"  # every row has it
    assert df["scale"].dtype == "float64"
    assert sorted(df["dim"].dropna().tolist()) == [512, 1024]


def test_expanded_parameters_leave_booleans_floats_and_text_alone():
    df = pd.DataFrame({"params_json": [json.dumps({"a": 1, "f": True, "x": 1.5, "s": "q"}),
                                       json.dumps({"a": 2, "x": 2, "s": "r"})]})
    out = expand_param_columns(df)
    assert out["a"].tolist() == [1, 2] and str(out["a"].dtype) == "int64"
    assert out["x"].tolist() == [1.5, 2.0] and out["x"].dtype == "float64"
    assert out["s"].tolist() == ["q", "r"]
    assert out["f"].iloc[0] is True or out["f"].iloc[0] == True  # noqa: E712
    assert "int" not in str(out["f"].dtype).lower()


# -- 2: an import says what it did not add ------------------------------------------------------

def test_import_says_rows_already_present_and_how_many_measured_other_values(capsys, tmp_path):
    store = _store(tmp_path / "a.duckdb", [
        _row("linear", {"dim": 512}), _row("linear", {"dim": 1024}),
        _row("linear", {"dim": 2048})])
    part = tmp_path / "r.parquet"
    assert cli_in_process(capsys, "results", "--store", str(store), "--out", str(part))[0] == 0
    target = tmp_path / "s.duckdb"
    code, out, _ = cli_in_process(capsys, "import", "results", str(part), "--store", str(target))
    assert code == 0 and out.strip() == f"added 3 rows to {target}"
    changed = pd.read_parquet(part)
    for col in ("mean_ns", "median_ns", "min_ns", "max_ns"):
        changed.loc[0, col] *= 2
    changed.to_parquet(part, index=False)
    code, out, _ = cli_in_process(capsys, "import", "results", str(part), "--store", str(target))
    assert code == 0
    assert out.strip() == (f"added 0 rows to {target}; 3 already present (the stored ones "
                           f"kept), 1 of them with other measured values than the file's "
                           f"(import into another --store to keep the file's)")
    with Store(target, read_only=True) as st:  # the stored values were kept
        assert sorted(st.results()["median_ns"]) == [2000.0] * 3


def test_import_of_a_json_round_trip_counts_no_row_as_different(capsys, tmp_path):
    store = _store(tmp_path / "a.duckdb", [
        _row("linear", {"dim": 512}, mean=1234.567890123456, median=1200.0, std=3.3333333333)])
    part = tmp_path / "r.json"
    assert cli_in_process(capsys, "results", "--store", str(store), "--out", str(part))[0] == 0
    code, out, _ = cli_in_process(capsys, "import", "results", str(part), "--store", str(store))
    assert code == 0
    assert out.strip() == f"added 0 rows to {store}; 1 already present (the stored ones kept)"


def test_import_counts_rows_repeated_within_the_file(tmp_path):
    store = _store(tmp_path / "a.duckdb", [_row("linear", {"dim": 512})])
    with Store(store, read_only=True) as st:
        df = st.results()
    part = tmp_path / "r.csv"
    pd.concat([df, df]).to_csv(part, index=False)
    with Store(tmp_path / "b.duckdb") as st:
        counts = st.import_results_counted(part)
    assert (counts.added, counts.present, counts.differ, counts.repeated) == (1, 0, 0, 1)


# -- 3: the spread is a share of the median -----------------------------------------------------

def test_table_spread_is_std_over_the_median_and_says_so(capsys, tmp_path):
    # an outlier: median 10 µs, mean 24.4 µs, std 28.5 µs -> 285% of the median (116.8% of
    # the mean, which the column showed next to the median)
    store = _store(tmp_path / "s.duckdb", [
        _row("linear", {"dim": 512}, median=10_000.0, mean=24_400.0, std=28_500.0)])
    code, out, _ = cli_in_process(capsys, "results", "--store", str(store))
    assert code == 0
    assert "std % of median" in out
    assert "285.0" in out and "116.8" not in out


# -- 4: ordered by op, pass and parameters; unwrapped in a file ---------------------------------

def _shapes(tmp_path: Path) -> Path:
    rows = []
    for i, dim in enumerate((2048, 512, 1024, 4096)):
        for pass_ in ("fwd", "bwd"):
            # ids against the parameters' order: the old table followed the ids
            rows.append(_row("linear", {"role": "qkv", "b": 1, "dim": dim}, pass_=pass_,
                             vid=f"{9 - i:x}" * 56))
    rows.append(_row("gelu", {"b": 1, "dim": 64}, vid="f" * 56))
    return _store(tmp_path / "s.duckdb", rows)


def _param_cells(text: str) -> list[str]:
    return [ln.split("│")[3].strip() for ln in text.splitlines()
            if ln.startswith("│") and ("linear" in ln or "gelu" in ln)]


def test_table_rows_follow_op_pass_and_numeric_parameters(capsys, tmp_path):
    store = _shapes(tmp_path)
    code, out, _ = cli_in_process(capsys, "results", "--store", str(store), "--limit", "4")
    assert code == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert [ln.split("│")[1].strip() + " " + ln.split("│")[2].strip() for ln in lines] == \
        ["gelu fwd", "linear bwd", "linear bwd", "linear bwd"]
    assert _param_cells(out) == ["b=1 dim=64", "role=qkv b=1 dim=512",
                                 "role=qkv b=1 dim=1024", "role=qkv b=1 dim=2048"]


@pytest.mark.parametrize("dest", ["file", "-"])
def test_table_written_with_out_does_not_wrap_at_80_columns(capsys, tmp_path, dest):
    rows = [_row("linear", {"role": "qkv", "mp": 1, "b": 1, "l": 128, "dim": 512,
                            "num_attention_heads": 32, "sequence_parallel": 0})]
    store = _store(tmp_path / "s.duckdb", rows)
    out = tmp_path / "t.txt" if dest == "file" else Path("-")
    code, printed, _ = cli_in_process(capsys, "results", "--store", str(store), "--out",
                                      str(out))
    assert code == 0
    text = out.read_text() if dest == "file" else printed
    cells = _param_cells(text)
    assert cells == ["role=qkv mp=1 b=1 l=128 dim=512 num_attention_heads=32 "
                     "sequence_parallel=0"], text
    assert max(len(ln) for ln in text.splitlines()) > 80


# -- 5: a resumed run names the settings its stored rows were measured with ---------------------

def _spec_and_rows(tmp_path: Path, threads: str, repeats: int) -> tuple[Path, Path]:
    """A one-vector linear spec and a store holding its rows as a cpu run with these
    settings records them (nothing is measured)."""
    from opatlas.backends.cpu import CpuBackend, cpu_model_name
    from opatlas.spec import load_spec
    from opatlas.sweep import VectorStream, canonical_json

    spec = write_spec(tmp_path / "lin.yml", {
        "name": "lin", "op": "linear", "dtype": "fp32", "repeats": 2, "warmup": 1,
        "params": {"role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": [512]}})
    vec = next(iter(VectorStream(load_spec(spec)))).vectors[0]
    versions = canonical_json(CpuBackend(threads=threads).versions())
    rows = [ResultRow(vec.id, vec.op, json.dumps(dict(vec.params)), p, "cpu",
                      cpu_model_name(), "fp32", "ok", repeats=repeats, mean_ns=1e6,
                      std_ns=1e3, median_ns=1e6, min_ns=9e5, max_ns=2e6,
                      versions_json=versions) for p in ("fwd", "bwd")]
    return spec, _store(tmp_path / "s.duckdb", rows)


def test_resume_says_the_stored_rows_were_measured_with_other_settings(capsys, tmp_path):
    spec, store = _spec_and_rows(tmp_path, threads="1", repeats=5)
    code, out, err = cli_in_process(capsys, "run", str(spec), "--store", str(store),
                                    "--repeats", "9", "--warmup", "0",
                                    "--backend-opt", "threads=2")
    assert code == 0, err
    assert "1 already in the store; ran 0" in out
    notes = [ln for ln in err.splitlines() if "other settings" in ln]
    assert len(notes) == 1, err
    note = notes[0]
    assert note.startswith("opatlas: note: 1 vector already in the store was measured")
    assert "repeats 5 (this run: 9)" in note and "threads 1 (this run: 2)" in note
    assert "--warmup cannot be compared" in note and "another --store" in note


def test_resume_with_the_same_settings_says_nothing_more(capsys, tmp_path):
    spec, store = _spec_and_rows(tmp_path, threads="1", repeats=5)
    code, out, err = cli_in_process(capsys, "run", str(spec), "--store", str(store),
                                    "--repeats", "5", "--backend-opt", "threads=1")
    assert code == 0, err
    assert "1 already in the store; ran 0" in out
    assert "other settings" not in err
