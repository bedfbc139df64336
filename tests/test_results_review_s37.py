"""Review s37 of ``opatlas results`` and ``opatlas import``: ``.pq`` is Parquet everywhere,
imported sample values do not invent how they were measured, JSON exports read back exactly,
a JSON file that is not a list of records is refused, ``--op`` of a catalog op filed under
several aliases reads them all, and ``--help`` says what ``--format ett`` does not take."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from conftest import cli_in_process, one_error, write_spec
from opatlas.samples import bundled_dataset
from opatlas.store import Store
from opatlas.store.db import RESULT_COLUMNS, ResultRow


@pytest.fixture(scope="module")
def run_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of a real cpu run: two linear shapes, forward and backward, 5 repeats."""
    from opatlas.cli import main

    tmp = tmp_path_factory.mktemp("run")
    spec = write_spec(tmp / "lin.yml", {
        "name": "lin", "op": "linear", "dtype": "fp32", "repeats": 5, "warmup": 1,
        "params": {"role": ["qkv"], "mp": [1], "b": [1], "l": [16], "dim": [64, 128]}})
    store = tmp / "run.duckdb"
    with pytest.raises(SystemExit) as done:
        main(["run", str(spec), "--store", str(store), "--backend", "cpu",
              "--backend-opt", "threads=1"])
    assert not done.value.code
    return store


def _rows(store: Path) -> pd.DataFrame:
    """The store's result rows in key order, as the store holds them."""
    with Store(store, read_only=True) as st:
        df = st.table("results")
    return df.sort_values(["vector_id", "pass"], ignore_index=True)


# -- 1: .pq is Parquet wherever .parquet is -----------------------------------------------------

def test_a_pq_export_imports_into_a_new_store(capsys, tmp_path, run_store):
    out = tmp_path / "r.pq"
    code, _, err = cli_in_process(capsys, "results", "--store", str(run_store), "--out",
                                  str(out))
    assert code == 0, err
    new = tmp_path / "new.duckdb"
    code, said, err = cli_in_process(capsys, "import", "results", str(out), "--store", str(new))
    assert code == 0, err
    assert said.strip() == f"added 4 rows to {new}"
    pd.testing.assert_frame_equal(_rows(new), _rows(run_store))


def test_sweep_expand_writes_pq(capsys, tmp_path):
    spec = write_spec(tmp_path / "lin.yml", {
        "name": "lin", "op": "linear", "params": {"role": ["qkv"], "mp": [1, 2], "b": [1],
                                                  "l": [16], "dim": [64, 128, 256]}})
    out = tmp_path / "v.pq"
    code, said, err = cli_in_process(capsys, "sweep", "expand", str(spec), "--out", str(out))
    assert code == 0, err
    assert f"wrote 6 vectors to {out}" in said
    vectors = pd.read_parquet(out)
    assert len(vectors) == 6 and sorted(set(vectors["op"])) == ["linear"]


def test_sweep_expand_still_refuses_another_suffix(capsys, tmp_path):
    spec = write_spec(tmp_path / "lin.yml", {
        "name": "lin", "op": "linear", "params": {"role": ["qkv"], "mp": [1], "b": [1],
                                                  "l": [16], "dim": [64]}})
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(spec), "--out",
                                  str(tmp_path / "v.txt"))
    one_error(code, err, "v.txt", ".json, .parquet or .pq")


# -- 2: imported sample values say what is known of them ----------------------------------------

def _first(rows: list[ResultRow]) -> ResultRow:
    assert rows
    return rows[0]


def test_bundled_a100_samples_keep_upstreams_description():
    from opatlas.store.ett import read_sample_file

    path = bundled_dataset("ett-a100") / "operator" / "NVIDIAA100-SXM4-80GB_linear1_fp16.csv"
    row = _first(read_sample_file(path, counts=False))
    assert row.repeats == 10
    assert row.message == (f"imported from {path.name} (upstream trimmed mean (3rd to 7th "
                           f"smallest) of 10 runs)")


def test_bundled_h100_samples_are_opatlas_medians():
    from opatlas.store.ett import read_sample_file

    path = bundled_dataset("h100") / "operator" / "NVIDIAH10080GBHBM3_baddbmm_fp16.csv"
    row = _first(read_sample_file(path, counts=False))
    assert row.repeats == 10
    assert row.message == f"imported from {path.name} (opatlas median of 10 (h100 dataset))"


def test_a_copy_of_a_bundled_file_elsewhere_knows_no_repeats(tmp_path):
    from opatlas.store.ett import merge_repeats, read_sample_file

    name = "NVIDIAA100-SXM4-80GB_flash_atten_fp16.csv"  # holds shapes sampled twice
    path = tmp_path / name
    shutil.copy(bundled_dataset("ett-a100") / "operator" / name, path)
    rows = read_sample_file(path, counts=False)
    assert {r.repeats for r in rows} == {0}
    assert {r.message for r in rows} == {f"value from {name}; repeats unknown"}
    merged, repeated = merge_repeats(rows)
    assert repeated > 0 and {r.repeats for r in merged} == {0}  # unknown stays unknown


def test_reimporting_an_ett_export_of_a_5_repeat_run_invents_no_count(capsys, tmp_path,
                                                                         run_store):
    folder = tmp_path / "ett"
    code, _, err = cli_in_process(capsys, "results", "--store", str(run_store), "--format",
                                  "ett", "--out", str(folder))
    assert code == 0, err
    new = tmp_path / "new.duckdb"
    code, said, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                     str(new))
    assert code == 0, err
    assert said.startswith("added 4 rows from 1 files")
    rows = _rows(new)
    (name,) = [p.name for p in folder.iterdir()]
    assert rows["repeats"].tolist() == [0] * 4
    assert set(rows["message"]) == {f"value from {name}; repeats unknown"}
    # the medians come back as exported (µs in the file)
    assert sorted(rows["median_ns"]) == pytest.approx(sorted(_rows(run_store)["median_ns"]),
                                                      rel=1e-9)
    # the table shows the count as unknown, and the rows export and import again
    code, table, err = cli_in_process(capsys, "results", "--store", str(new))
    assert code == 0, err
    assert all(re.search(r"\s\?\s", ln) for ln in table.splitlines() if "dim=" in ln), table
    out = tmp_path / "again.json"
    assert cli_in_process(capsys, "results", "--store", str(new), "--out", str(out))[0] == 0
    code, said, err = cli_in_process(capsys, "import", "results", str(out), "--store",
                                     str(tmp_path / "again.duckdb"))
    assert code == 0 and said.startswith("added 4 rows"), err


# -- 3: JSON exports are lossless ---------------------------------------------------------------

MEAN = 39869.857142857145  # pandas' to_json wrote 39869.8571428571
CREATED = datetime(2026, 1, 2, 3, 4, 5, 123456)


def _exact_store(path: Path) -> Path:
    with Store(path) as st:
        st.add_results([ResultRow(
            "v1", "linear", json.dumps({"role": "qkv", "dim": 64}), "fwd", "cpu", "X", "fp32",
            "ok", repeats=7, mean_ns=MEAN, std_ns=0.1 + 0.2, median_ns=1 / 3 * 1e5,
            min_ns=1e-300 * 1e300 * 1000.0 / 3, max_ns=2.0**60 + 0.5 ** 3, flops=1e13 / 7,
            created_at=CREATED)])
    return path


def test_json_export_keeps_every_double_and_the_microseconds(capsys, tmp_path):
    store = _exact_store(tmp_path / "t.duckdb")
    out = tmp_path / "r.json"
    assert cli_in_process(capsys, "results", "--store", str(store), "--out", str(out))[0] == 0
    (record,) = json.loads(out.read_text())
    assert record["mean_ns"] == MEAN and record["std_ns"] == 0.1 + 0.2
    assert record["median_ns"] == 1 / 3 * 1e5 and record["flops"] == 1e13 / 7
    assert record["created_at"] == "2026-01-02T03:04:05.123456"
    assert record["dim"] == 64 and record["repeats"] == 7


def test_json_csv_and_parquet_round_trips_give_the_same_store(capsys, tmp_path):
    store = _exact_store(tmp_path / "t.duckdb")
    stores = {}
    for ext in ("json", "csv", "parquet"):
        out = tmp_path / f"r.{ext}"
        assert cli_in_process(capsys, "results", "--store", str(store), "--out",
                              str(out))[0] == 0
        stores[ext] = tmp_path / f"{ext}.duckdb"
        code, said, err = cli_in_process(capsys, "import", "results", str(out), "--store",
                                         str(stores[ext]))
        assert code == 0 and said.startswith("added 1 rows"), err
    original = _rows(store)
    for ext, path in stores.items():
        pd.testing.assert_frame_equal(_rows(path)[list(RESULT_COLUMNS)],
                                      original[list(RESULT_COLUMNS)], check_exact=True,
                                      obj=f"the store imported from .{ext}")
    # a second import of the JSON export finds every value the same as stored
    code, said, _ = cli_in_process(capsys, "import", "results", str(tmp_path / "r.json"),
                                   "--store", str(store))
    assert said.strip() == f"added 0 rows to {store}; 1 already present (the stored ones kept)"


# -- 4: a JSON file that is not a list of result records ----------------------------------------

@pytest.mark.parametrize(("text", "got"), [
    ("{}", "got an object"), ("null", "got null"), ('{"a": 1}', "got an object"),
    ("[1, 2]", "got a list holding a number"), ('"x"', "got a string")])
def test_a_json_file_that_is_not_a_list_of_records_is_refused(capsys, tmp_path, text, got):
    path = tmp_path / "j.json"
    path.write_text(text)
    store = tmp_path / "s.duckdb"
    code, out, err = cli_in_process(capsys, "import", "results", str(path), "--store",
                                    str(store))
    one_error(code, err, str(path), "not a results export: expected a JSON list of result "
                                    "records", got)
    assert "added" not in out


def test_an_empty_json_list_is_still_an_empty_export(capsys, tmp_path):
    path = tmp_path / "j.json"
    path.write_text("[]")
    store = tmp_path / "s.duckdb"
    code, out, err = cli_in_process(capsys, "import", "results", str(path), "--store",
                                    str(store))
    assert code == 0 and out.strip() == f"added 0 rows to {store}", err


# -- 5: --op of a catalog op filed under several of its aliases ---------------------------------

ALIASES = ["linear1", "linear2", "linear3", "linear4", "linear_final"]


def _alias_store(path: Path) -> Path:
    with Store(path) as st:
        st.add_results([ResultRow(f"v{i}", op, json.dumps({"dim": 64 * (i + 1)}), "fwd",
                                  "ett-import", "A100", "fp16", "ok", repeats=10,
                                  mean_ns=1e3 * (i + 1), median_ns=1e3 * (i + 1))
                        for i, op in enumerate([*ALIASES, "flash_atten"])])
    return path


def test_op_reads_every_alias_it_is_filed_under(capsys, tmp_path):
    store = _alias_store(tmp_path / "a100.duckdb")
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--op",
                                    "linear", "--format", "json")
    assert code == 0, err
    assert sorted(r["op"] for r in json.loads(out)) == ALIASES
    assert (f"note: --op linear: the store files it under its aliases {', '.join(ALIASES)}"
            in err)
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--op",
                                    "linear")
    assert code == 0, err
    assert out.lstrip().startswith("5 result rows")
    assert "flash_atten" not in out


def test_aliases_that_would_need_a_filter_each_are_named():
    from opatlas.cli.results_cmd import _several_aliases
    from opatlas.errors import OpatlasError

    with pytest.raises(OpatlasError, match=r"^--op x: x is stored under its aliases a, b: "
                                           r"give one$"):
        _several_aliases("x", [("a", {"role": "qkv"}), ("b", {})])


# -- 6: --help says what --format ett does not take ---------------------------------------------

def test_help_says_op_status_and_limit_are_not_for_ett(capsys):
    code, out, _ = cli_in_process(capsys, "results", "--help")
    assert code == 0
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
    assert "in any format" not in text
    for option in ("--op", "--status", "--limit"):
        at = text.index(f"{option} ")
        assert "ett" in text[at:at + 200], (option, text)
    assert "Not with --format ett, which writes every ok row" in text
