"""The DuckDB store: schema, idempotent writes, import/export round trips, refusals."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from opatlas.errors import StoreError
from opatlas.store import SCHEMA_VERSION, ResultRow, Store


def _row(i: int, status: str = "ok") -> ResultRow:
    return ResultRow(vector_id=f"v{i}", op="noop", params_json=f'{{"i":{i}}}', pass_="fwd",
                     backend="cpu", device="test", dtype="fp32", status=status, repeats=3,
                     mean_ns=10.0 + i, std_ns=1.0, median_ns=10.0, min_ns=9.0, max_ns=12.0)


def test_results_are_recorded_once(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        assert st.add_results([_row(i) for i in range(5)]) == 5
        assert st.add_results([_row(i) for i in range(3, 8)]) == 3  # 3, 4 already there
        assert st.count() == 8
        assert st.done_vector_ids("cpu", "test") == {f"v{i}" for i in range(8)}
        assert st.done_vector_ids("cuda", "test") == set()


def test_failed_transaction_leaves_nothing(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        st.add_results([_row(0)])
        with pytest.raises(RuntimeError), st.transaction():
            st.con.execute("DELETE FROM results").fetchall()
            raise RuntimeError("boom")
        assert st.count() == 1


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_export_import_round_trip(tmp_path, suffix):
    src = tmp_path / "a.duckdb"
    with Store(src) as st:
        st.add_results([_row(i, "ok" if i % 2 else "crash") for i in range(6)])
        st.export(tmp_path / f"r{suffix}")
        before = st.results().drop(columns=["created_at"])
    with Store(tmp_path / "b.duckdb") as st:
        assert st.import_results(tmp_path / f"r{suffix}") == 6
        assert st.import_results(tmp_path / f"r{suffix}") == 0
        after = st.results().drop(columns=["created_at"])
    pd.testing.assert_frame_equal(before.reset_index(drop=True), after.reset_index(drop=True),
                                  check_dtype=False)
    assert list(after["i"]) == list(range(6))  # params expanded to columns


def test_not_a_duckdb_file_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.duckdb"
    path.write_bytes(b"these are my notes, not a database\n" * 10)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a DuckDB file"):
        Store(path)
    assert path.read_bytes() == before


def test_newer_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "new.duckdb"
    with Store(path) as st:
        st.add_results([_row(0)])
        st.con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                       [str(SCHEMA_VERSION + 1)]).fetchall()
    mtime, before = path.stat().st_mtime_ns, path.read_bytes()
    with pytest.raises(StoreError, match="newer"):
        Store(path)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime


def test_foreign_duckdb_file_is_refused(tmp_path):
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (x INT)").fetchall()
    con.close()
    with pytest.raises(StoreError, match="not an opatlas store"):
        Store(path)
