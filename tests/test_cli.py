"""CLI verbs end to end in real subprocesses."""

from __future__ import annotations

import json

import pandas as pd

from conftest import run_cli, write_spec


def test_run_then_results_in_every_format(tmp_path):
    spec = write_spec(tmp_path / "ln.yml", {"op": "layernorm", "params": {
        "b": [1], "l": [4, 8], "dim": [16]}, "repeats": 2, "warmup": 0})
    store = tmp_path / "s.duckdb"
    out = run_cli("run", str(spec), "--backend", "cpu", "--store", str(store), "--repeats", "3",
                  check=True).stdout
    assert "ran 2 (ok 2)" in out and str(store) in out
    table = run_cli("results", "--store", str(store), check=True).stdout
    assert "layernorm" in table and "4 result rows" in table
    rows = json.loads(run_cli("results", "--store", str(store), "--format", "json",
                              check=True).stdout)
    assert len(rows) == 4 and {r["pass"] for r in rows} == {"fwd", "bwd"}
    assert all(r["repeats"] == 3 for r in rows)
    run_cli("results", "--store", str(store), "--format", "csv", "--out", str(tmp_path / "r.csv"),
            check=True)
    run_cli("results", "--store", str(store), "--format", "parquet", "--out",
            str(tmp_path / "r.parquet"), check=True)
    assert len(pd.read_csv(tmp_path / "r.csv")) == len(pd.read_parquet(tmp_path / "r.parquet")) == 4
    other = tmp_path / "other.duckdb"
    assert "added 4 rows" in run_cli("import", "results", str(tmp_path / "r.parquet"), "--store",
                                     str(other), check=True).stdout


def test_results_on_a_missing_or_foreign_store_is_a_clear_error(tmp_path):
    proc = run_cli("results", "--store", str(tmp_path / "none.duckdb"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    bad = tmp_path / "bad.duckdb"
    bad.write_text("hello")
    proc = run_cli("results", "--store", str(bad))
    assert proc.returncode == 2 and "not a DuckDB file" in proc.stderr
    assert bad.read_text() == "hello"


def test_every_verb_has_help_with_examples():
    for verb in (["run"], ["results"], ["sweep", "expand"], ["demo"]):
        out = run_cli(*verb, "--help", check=True).stdout
        assert "Example" in out, verb


def test_demo_runs_and_prints_the_store_path(tmp_path):
    proc = run_cli("demo", "--out", str(tmp_path / "d"), "--repeats", "1", check=True)
    assert "store:" in proc.stdout and (tmp_path / "d" / "opatlas.duckdb").exists()
    assert "linear" in proc.stdout and "layernorm" in proc.stdout
    report = tmp_path / "d" / "report.html"
    assert report.exists() and f"report: {report.resolve()}" in proc.stdout.replace("\n", "")
    from opatlas.store import Store

    with Store(tmp_path / "d" / "opatlas.duckdb", read_only=True) as st:
        versions = set(st.results()["versions_json"])
    assert all('"threads":"1"' in v.replace(" ", "") for v in versions), versions
