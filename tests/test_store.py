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


def _sha_row(i: int, status: str = "ok", device: str = "test") -> ResultRow:
    from opatlas.sweep import vector_id

    row = _row(i, status)
    row.vector_id, row.device = vector_id("noop", {"i": i}), device
    return row


def test_done_keys_are_exactly_the_recorded_vectors(tmp_path):
    from opatlas.store.keys import contains, vector_keys
    from opatlas.sweep import vector_id

    ids = [vector_id("noop", {"i": i}) for i in range(40)]
    with Store(tmp_path / "s.duckdb") as st:
        st.add_results([_sha_row(i, "error" if i % 4 == 0 else "ok") for i in range(0, 40, 2)])
        st.add_results([_sha_row(1, device="other"), _row(999)])  # another device; not sha224
        done = st.done_keys("cpu", "test")
        ok = st.done_keys("cpu", "test", statuses=("ok", "invalid"))
        assert len(st.done_keys("cuda", "test")) == 0
    assert list(contains(done, vector_keys(ids))) == [i % 2 == 0 for i in range(40)]
    assert list(contains(ok, vector_keys(ids))) == [i % 4 == 2 for i in range(40)]
    assert len(done) == 20 and list(done) == sorted(done)


def test_vectors_are_added_batch_by_batch_once(tmp_path):
    from opatlas.sweep import Vector

    vecs = [Vector.make("noop", {"i": i}, i) for i in range(10)]
    with Store(tmp_path / "s.duckdb") as st:
        st.add_sweep("sw", "n", "noop", "opatlas", "{}", vecs[:4])
        st.add_vectors("sw", vecs[2:8], [(vecs[8], "too big")])
        st.add_vectors("sw", [], [])
        df = st.table("vectors").sort_values("idx")
    assert list(df["idx"]) == list(range(9))
    assert list(df["valid"]) == [True] * 8 + [False]
    assert df["reason"].iloc[-1] == "too big"


def test_memory_limit_from_the_environment_and_bad_values(tmp_path, monkeypatch):
    from opatlas.store.db import MEMORY_LIMIT_ENV

    with Store(tmp_path / "s.duckdb") as st:
        monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
        st.limit_memory()
        assert st.memory_limit == 64 * 10**6
        monkeypatch.setenv(MEMORY_LIMIT_ENV, "1.5GiB")
        st.limit_memory()
        assert st.memory_limit == int(1.5 * 2**30)
        setting = st.con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
        assert setting.startswith("1.5"), setting
        monkeypatch.setenv(MEMORY_LIMIT_ENV, "none")
        st.limit_memory()
        assert st.memory_limit is None
        assert st.con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] != setting
        for bad, words in [("lots", "expected a size"), ("12 parsecs", "expected a size"),
                           ("512KB", "too small")]:
            monkeypatch.setenv(MEMORY_LIMIT_ENV, bad)
            with pytest.raises(StoreError, match=f"{MEMORY_LIMIT_ENV} '{bad}': {words}"):
                st.limit_memory()


def test_a_store_outgrowing_its_memory_limit_raises_it_and_loses_nothing(tmp_path, capsys):
    """A write that runs out of the limit is rolled back, the limit doubles, and the write
    runs again (each row once)."""
    with Store(tmp_path / "s.duckdb") as st:
        st.limit_memory("1MiB")
        for start in range(0, 30_000, 10_000):
            assert st.add_results([_sha_row(i) for i in range(start, start + 10_000)]) == 10_000
        assert st.add_results([_sha_row(i) for i in range(0, 30_000, 7)]) == 0
        assert st.count() == 30_000 and len(st.done_keys("cpu", "test")) == 30_000
        assert st.memory_limit is not None and st.memory_limit > 2**20
    assert "raised to" in capsys.readouterr().err
