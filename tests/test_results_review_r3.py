"""Review round 3 of the store and ``opatlas results``: a full disk and a store cut short are
one line (exit 2), an export to upstream's layout skips the ops it cannot hold, ``--out``'s
``-`` and trailing ``/``, ``--limit`` in every format, an unknown ``--op``, and a long text
table written as plain text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.errors import StoreError
from opatlas.store import Store
from opatlas.store.db import RESULT_COLUMNS, ResultRow
from opatlas.store.ett import export_ett_report
from opatlas.store.writing import store_for_writing

FULL = 'Could not write file "s.duckdb.wal": No space left on device'


def _rows(n: int, op: str = "linear", params: dict[str, Any] | None = None,
          start: int = 0) -> list[ResultRow]:
    from opatlas.sweep.expand import vector_id

    def row(i: int) -> ResultRow:
        shape = {"m": i, **(params or {})}  # the real id: an import checks it
        return ResultRow(vector_id(op, shape), op, json.dumps(shape), "fwd", "cpu", "X",
                         "fp32", "ok", repeats=3, mean_ns=2000.0, std_ns=20.0,
                         median_ns=2000.0, flops=4000.0)

    return [row(i) for i in range(start, start + n)]


def _store(path: Path, n: int = 5) -> Path:
    with Store(path) as st:
        st.add_results(_rows(n))
    return path


class _FullDisk:
    """A connection whose COMMIT fails for want of space, as DuckDB's does on a full disk;
    ``fatal``: DuckDB then gives the database up, and every later call fails too."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fatal: bool) -> None:
        self._con, self._fatal, self._dead = con, fatal, False

    def _check(self) -> None:
        if self._dead:
            raise duckdb.FatalException("FATAL Error: Failed: database has been invalidated "
                                        f"because of a previous fatal error. Original error: "
                                        f"{FULL}")

    def execute(self, sql: str, *args: Any) -> Any:
        self._check()
        if sql.startswith("COMMIT"):
            self._con.execute("ROLLBACK")
            if self._fatal:
                self._dead = True
                raise duckdb.FatalException(f"FATAL Error: Failed to create checkpoint: {FULL}")
            raise duckdb.TransactionException(f"TransactionContext Error: Failed to commit: "
                                              f"{FULL}")
        return self._con.execute(sql, *args)

    def register(self, *args: Any) -> Any:
        self._check()
        return self._con.register(*args)

    def unregister(self, *args: Any) -> Any:
        self._check()
        return self._con.unregister(*args)

    def close(self) -> None:
        self._con.close()


@pytest.mark.parametrize("fatal", [False, True])
def test_a_full_disk_is_one_line_and_keeps_the_rows_recorded(tmp_path, fatal):
    path = _store(tmp_path / "s.duckdb")
    with pytest.raises(StoreError) as info, Store(path) as st:
        st.con = _FullDisk(st.con, fatal)  # type: ignore[assignment]
        st.add_results(_rows(3, start=100))
    assert str(path) in str(info.value) and "no space left on device" in str(info.value)
    assert "\n" not in str(info.value)
    with Store(path, read_only=True) as st:
        assert st.count() == 5


def test_a_full_disk_during_an_import_exits_2_in_one_line(capsys, tmp_path, monkeypatch):
    path = _store(tmp_path / "s.duckdb")
    part = tmp_path / "part.csv"
    pd.DataFrame([r.as_tuple() for r in _rows(4, start=50)],
                 columns=list(RESULT_COLUMNS)
                 ).to_csv(part, index=False)
    real = Store.__init__

    def opened(self: Store, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        if not kwargs.get("read_only"):
            self.con = _FullDisk(self.con, fatal=True)  # type: ignore[assignment]

    monkeypatch.setattr(Store, "__init__", opened)
    code, _, err = cli_in_process(capsys, "import", "results", str(part), "--store", str(path))
    one_error(code, err, str(path), "no space left on device")
    monkeypatch.setattr(Store, "__init__", real)
    with Store(path, read_only=True) as st:
        assert st.count() == 5


def _truncated(tmp_path: Path) -> Path:
    """A store cut short (``head -c``): its catalog lies past the end of the file."""
    path = _store(tmp_path / "whole.duckdb", 400)
    cut = tmp_path / "trunc.duckdb"
    cut.write_bytes(path.read_bytes()[:300_000])
    return cut


def test_a_store_cut_short_is_refused_in_one_line_and_left_untouched(capsys, tmp_path):
    cut = _truncated(tmp_path)
    before = cut.read_bytes()
    for read_only in (True, False):
        with pytest.raises(StoreError, match="Corrupt database file"):
            Store(cut, read_only=read_only)
    with pytest.raises(StoreError, match="Corrupt database file"), store_for_writing(cut):
        pass
    code, _, err = cli_in_process(capsys, "results", "--store", str(cut))
    one_error(code, err, f"cannot open store {cut}: Corrupt database file")
    assert cut.read_bytes() == before


def test_the_ett_export_skips_ops_whose_parameters_are_lists(capsys, tmp_path):
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.add_results(_rows(3, "reshard", {"input_shape": [1, 1, 64, 64]}))
    code, _, err = cli_in_process(capsys, "results", "--store", str(path), "--format", "ett",
                                  "--out", str(tmp_path / "none"))
    one_error(code, err, "no ok result has an estimate-train-time layout", "reshard: 3",
              "input_shape")
    assert not (tmp_path / "none").exists()
    with Store(path) as st:
        st.add_results(_rows(2, "mul"))
        done = export_ett_report(st, tmp_path / "out")
    assert [p.name for p in done.paths] == ["X_mul_fp32.csv"]
    assert pd.read_csv(done.paths[0])["m"].tolist() == [0, 1]
    assert any(n.startswith("reshard: 3 ok result row(s) not written") for n in done.notes)


def test_out_dash_and_a_trailing_slash(capsys, tmp_path, monkeypatch):
    path = _store(tmp_path / "s.duckdb")
    monkeypatch.chdir(tmp_path)
    code, _, err = cli_in_process(capsys, "results", "--store", str(path), "--format", "ett",
                                  "--out", "-")
    one_error(code, err, "--out -", "folder")
    assert not Path("-").exists()
    for fmt in ("table", "csv"):
        code, _, err = cli_in_process(capsys, "results", "--store", str(path), "--format", fmt,
                                      "--out", "dir/")
        one_error(code, err, "--out dir/", "a folder")
        assert not Path("dir").exists()
    code, out, _ = cli_in_process(capsys, "results", "--store", str(path), "--format", "ett",
                                  "--out", "d/")
    assert code == 0 and Path("d/X_linear_fp32.csv").is_file()
    code, out, _ = cli_in_process(capsys, "results", "--store", str(path), "--format", "csv",
                                  "--out", "-")
    assert code == 0 and len(out.splitlines()) == 6


def test_limit_holds_in_every_format(capsys, tmp_path):
    path = _store(tmp_path / "s.duckdb")
    base = ("results", "--store", str(path), "--limit", "3")
    code, out, _ = cli_in_process(capsys, *base, "--format", "csv")
    assert code == 0 and len(out.splitlines()) == 4
    code, out, _ = cli_in_process(capsys, *base, "--format", "json")
    assert code == 0 and len(json.loads(out)) == 3
    code, _, _ = cli_in_process(capsys, *base, "--out", str(tmp_path / "r.parquet"))
    assert code == 0 and len(pd.read_parquet(tmp_path / "r.parquet")) == 3
    code, out, _ = cli_in_process(capsys, "results", "--store", str(path), "--format", "csv")
    assert code == 0 and len(out.splitlines()) == 6  # no --limit: every row
    code, _, err = cli_in_process(capsys, *base, "--format", "ett", "--out", str(tmp_path / "e"))
    one_error(code, err, "--limit 3", "--format ett")


def test_an_unknown_op_exits_2_naming_the_stored_ops(capsys, tmp_path):
    path = _store(tmp_path / "s.duckdb")
    with Store(path) as st:
        st.add_results(_rows(1, "mul"))
    code, out, err = cli_in_process(capsys, "results", "--store", str(path), "--op", "lineer")
    one_error(code, err, "no op 'lineer'", "it has linear, mul", "did you mean 'linear'")
    assert out == ""


def test_a_long_text_table_is_plain_text_with_the_same_columns(capsys, tmp_path):
    from opatlas.cli.results_cmd import PLAIN_ROWS

    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.add_results(_rows(PLAIN_ROWS + 1))
    code, out, _ = cli_in_process(capsys, "results", "--store", str(path), "--limit", "0")
    lines = out.splitlines()
    assert code == 0 and len(lines) == PLAIN_ROWS + 4 and "│" not in out
    assert lines[0] == f"{PLAIN_ROWS + 1} result rows"
    assert lines[1].split() == ["op", "pass", "params", "status", "median", "µs", "std", "%",
                                "of", "median", "n", "GFLOP/s"]
    assert lines[3].split() == ["linear", "fwd", "m=0", "ok", "2.00", "1.0", "3", "2.00"]
    code, out, _ = cli_in_process(capsys, "results", "--store", str(path))
    assert code == 0 and "│ linear │ fwd" in out  # 50 rows: rich's table still
