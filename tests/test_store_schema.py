"""Store schema 2: no primary-key index on vectors/results (DuckDB cannot evict one), a key hash
with full-key dedup instead, and the migration of schema-1 stores."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest

from opatlas.errors import StoreError
from opatlas.store import SCHEMA_VERSION, ResultRow, Store
from opatlas.store import db as store_db
from opatlas.store.db import RESULT_COLUMNS, key_hash
from opatlas.sweep import Vector, vector_id

# Schema 1 as opatlas wrote it (primary keys on vectors and results).
V1_DDL = """
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE sweeps (
    sweep_id VARCHAR PRIMARY KEY, name VARCHAR, op VARCHAR, source VARCHAR,
    spec_json VARCHAR, created_at TIMESTAMP);
CREATE TABLE vectors (
    sweep_id VARCHAR, vector_id VARCHAR, idx BIGINT, op VARCHAR, params_json VARCHAR,
    valid BOOLEAN, reason VARCHAR, PRIMARY KEY (sweep_id, vector_id));
CREATE TABLE results (
    vector_id VARCHAR, op VARCHAR, params_json VARCHAR, pass VARCHAR, backend VARCHAR,
    device VARCHAR, dtype VARCHAR, repeats INTEGER, mean_ns DOUBLE, std_ns DOUBLE,
    median_ns DOUBLE, min_ns DOUBLE, max_ns DOUBLE, flops DOUBLE, min_bytes DOUBLE,
    status VARCHAR, message VARCHAR, versions_json VARCHAR, created_at TIMESTAMP,
    PRIMARY KEY (vector_id, pass, backend, device, dtype));
INSERT INTO meta VALUES ('schema_version', '1');
"""


def _row(i: int, mean: float = 10.0, *, pass_: str = "fwd", device: str = "test") -> ResultRow:
    return ResultRow(vector_id=vector_id("noop", {"i": i}), op="noop",
                     params_json=f'{{"i":{i}}}', pass_=pass_, backend="cpu", device=device,
                     dtype="fp32", status="ok", repeats=3, mean_ns=mean)


def _vec(i: int) -> Vector:
    return Vector.make("noop", {"i": i}, i)


def _v1_store(path, n_vectors: int = 50, n_results: int = 40) -> None:
    con = duckdb.connect(str(path))
    con.execute(V1_DDL).fetchall()
    con.execute("INSERT INTO sweeps VALUES ('sw', 'n', 'noop', 'opatlas', '{}', ?)",
                [datetime(2024, 1, 1)]).fetchall()
    con.executemany("INSERT INTO vectors VALUES ('sw', ?, ?, 'noop', ?, ?, ?)",
                    [[_vec(i).id, i, f'{{"i":{i}}}', i % 7 != 0, None if i % 7 else "too big"]
                     for i in range(n_vectors)])
    rows = [_row(i // 2, 1.0 + i, pass_=("fwd", "bwd")[i % 2]).as_tuple() for i in range(n_results)]
    con.executemany(f"INSERT INTO results VALUES ({', '.join('?' * len(RESULT_COLUMNS))})", rows)
    con.close()


def _v1_contents(path) -> tuple[str, dict[str, list[tuple]]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()[0][0]
        def rows(table: str) -> list[tuple]:
            hashed = version != "1" and table != "sweeps"
            return con.execute(f"SELECT * {'EXCLUDE key_hash' if hashed else ''} FROM {table} "
                               f"ORDER BY ALL").fetchall()

        tables = {t: rows(t) for t in ("sweeps", "vectors", "results")}
    finally:
        con.close()
    return version, tables


def _pk_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_constraints() WHERE constraint_type IN "
        "('PRIMARY KEY', 'UNIQUE')").fetchall()}


# -- dedup ------------------------------------------------------------------------------------

def test_no_duplicates_across_batches_or_within_one_and_the_first_write_wins(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        assert st.add_results([_row(0, 1.0), _row(1, 1.0), _row(0, 2.0), _row(1, 3.0)]) == 2
        assert st.add_results([_row(0, 4.0), _row(2, 4.0), _row(2, 5.0)]) == 1
        assert st.add_results([_row(i, 9.0) for i in range(3)]) == 0
        assert st.add_results([_row(0, 6.0, pass_="bwd"), _row(0, 7.0, device="other")]) == 2
        df = st.results(expand_params=False)
        assert len(df) == st.count() == 5
        means = {(r.vector_id, r["pass"], r.device): r.mean_ns for _, r in df.iterrows()}
        assert means == {(_row(0).vector_id, "fwd", "test"): 1.0,
                         (_row(1).vector_id, "fwd", "test"): 1.0,
                         (_row(2).vector_id, "fwd", "test"): 4.0,
                         (_row(0).vector_id, "bwd", "test"): 6.0,
                         (_row(0).vector_id, "fwd", "other"): 7.0}
        assert "key_hash" not in df.columns and "key_hash" not in st.table("results").columns


def test_vectors_are_recorded_once_first_write_wins(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        st.add_sweep("sw", "n", "noop", "opatlas", "{}", [_vec(0), _vec(1), _vec(0)])
        st.add_vectors("sw", [_vec(1), _vec(2)], [(_vec(0), "late"), (_vec(3), "too big")])
        st.add_vectors("other", [_vec(0)])  # the same vector in another sweep is another row
        df = st.table("vectors")
    assert "key_hash" not in df.columns
    assert sorted(zip(df.sweep_id, df.idx, df.valid, df.reason.fillna(""), strict=True)) == [
        ("other", 0, True, ""), ("sw", 0, True, ""), ("sw", 1, True, ""), ("sw", 2, True, ""),
        ("sw", 3, False, "too big")]


def test_distinct_keys_with_the_same_hash_are_both_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(store_db, "key_hash_sql", lambda columns: "CAST(42 AS BIGINT)")
    with Store(tmp_path / "s.duckdb") as st:
        assert st.add_results([_row(0, 1.0), _row(1, 1.0)]) == 2
        assert st.add_results([_row(2, 1.0), _row(1, 2.0), _row(0, 2.0)]) == 1
        assert st.add_results([_row(i) for i in range(3)]) == 0
        st.add_sweep("sw", "n", "noop", "opatlas", "{}", [_vec(0), _vec(1)])
        st.add_vectors("sw", [_vec(1), _vec(2)])
        assert st.count() == 3 and st.count("vectors") == 3
        assert st.con.execute("SELECT DISTINCT key_hash FROM results").fetchall() == [(42,)]
        assert set(st.results()["mean_ns"]) == {1.0}


def test_the_sql_key_hash_is_the_documented_one(tmp_path):
    keys = [("sw", "abc"), ("s|w", "x"), ("s", "|wx"), ("übung", "ß" * 3), ("", "")]
    con = duckdb.connect()
    got = [con.execute(f"SELECT {store_db.key_hash_sql(['a', 'b'])} FROM (SELECT ? AS a, ? AS b)",
                       list(k)).fetchall()[0][0] for k in keys]
    assert got == [key_hash(*k) for k in keys]
    assert len(set(got)) == len(keys)  # a separator inside a field cannot make keys meet
    # pinned: a store's hashes must not change with the process, opatlas or DuckDB version
    assert key_hash("sw", "abc") == int(__import__("hashlib").md5(b"2|sw|3|abc").hexdigest()[:16],
                                        16) - 2**63


def test_no_index_on_vectors_or_results(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        st.add_sweep("sw", "n", "noop", "opatlas", "{}", [_vec(i) for i in range(5000)])
        st.add_results([_row(i, pass_=p) for i in range(5000) for p in ("fwd", "bwd")])
        indexed = {r[0] for r in st.con.execute("SELECT table_name FROM duckdb_indexes()")
                   .fetchall()}
        assert not indexed & {"vectors", "results"}
        assert not _pk_tables(st.con) & {"vectors", "results"}
        art = st.con.execute("SELECT memory_usage_bytes FROM duckdb_memory() "
                             "WHERE tag = 'ART_INDEX'").fetchall()[0][0]
        assert art < 2**20  # meta's and sweeps' keys only (15k rows had 2 MB of index in v1)


# -- schema 1 ---------------------------------------------------------------------------------

def test_a_schema_1_store_is_migrated_with_every_row(tmp_path, capsys):
    path = tmp_path / "v1.duckdb"
    _v1_store(path)
    _, before = _v1_contents(path)
    with Store(path) as st:
        assert not _pk_tables(st.con) & {"vectors", "results"}
        assert st.count("vectors") == 50 and st.count() == 40
        assert st.add_results([_row(0, 99.0), _row(100)]) == 1  # (0, fwd) was there
        st.add_vectors("sw", [_vec(0), _vec(50)])
        hashes = st.con.execute("SELECT vector_id, pass, backend, device, dtype, key_hash "
                                "FROM results").fetchall()
        assert all(h == key_hash(*k) for *k, h in hashes)
    err = capsys.readouterr().err
    assert "migrating the store" in err and "schema 1 to 2" in err and len(err.splitlines()) == 1
    version, after = _v1_contents(path)
    assert version == str(SCHEMA_VERSION) == "2"
    assert after["sweeps"] == before["sweeps"]
    assert set(before["vectors"]) < set(after["vectors"]) and len(after["vectors"]) == 51
    assert set(before["results"]) < set(after["results"]) and len(after["results"]) == 41
    with duckdb.connect(str(path), read_only=True) as con:
        assert {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables")
                .fetchall()} == {"meta", "sweeps", "vectors", "results"}
    with Store(path) as st:  # once
        assert st.count() == 41
    assert capsys.readouterr().err == ""


def test_a_failed_migration_leaves_the_schema_1_store_as_it_was(tmp_path, monkeypatch, capsys):
    path = tmp_path / "v1.duckdb"
    _v1_store(path)
    before = _v1_contents(path)
    real = store_db.key_hash_sql

    def failing(columns):  # vectors migrate, then results fail mid-way
        return "CAST(error('disk on fire') AS BIGINT)" if "pass" in columns else real(columns)

    monkeypatch.setattr(store_db, "key_hash_sql", failing)
    with pytest.raises(StoreError, match=r"cannot migrate .* schema 1 to 2: .*disk on fire.*"
                                         r"left as it was"):
        Store(path)
    assert "migrating" in capsys.readouterr().err
    assert _v1_contents(path) == before
    with duckdb.connect(str(path), read_only=True) as con:
        assert {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables")
                .fetchall()} == {"meta", "sweeps", "vectors", "results"}
        assert {"vectors", "results"} <= _pk_tables(con)
    monkeypatch.setattr(store_db, "key_hash_sql", real)
    with Store(path) as st:  # and it migrates once the cause is gone
        assert st.count() == 40 and st.schema_version == 2


def test_a_schema_1_store_opened_read_only_is_read_as_it_is(tmp_path, capsys):
    path = tmp_path / "v1.duckdb"
    _v1_store(path)
    raw = path.read_bytes()
    with Store(path, read_only=True) as st:
        assert st.schema_version == 1
        assert st.count() == 40 and len(st.table("vectors")) == 50
        df = st.results()
        assert list(df.columns[:len(RESULT_COLUMNS)]) == list(RESULT_COLUMNS) and len(df) == 40
        assert len(st.done_keys("cpu", "test")) == 20
        with pytest.raises(StoreError, match="read-only"):
            st.add_results([_row(1000)])
    assert path.read_bytes() == raw
    assert capsys.readouterr().err == ""
    assert _v1_contents(path)[0] == "1"


def test_result_row_tuple_is_in_column_order():
    from opatlas.store.db import RESULT_COLUMNS, ResultRow

    row = ResultRow("v1", "gemm", "{}", "bwd", "cpu", "dev", "fp16", "ok", repeats=3,
                    mean_ns=2.0, median_ns=1.5, message="m")
    got = dict(zip(RESULT_COLUMNS, row.as_tuple(), strict=True))
    assert got["pass"] == "bwd" and got["vector_id"] == "v1" and got["median_ns"] == 1.5
    assert got["repeats"] == 3 and got["std_ns"] is None and got["created_at"] == row.created_at
