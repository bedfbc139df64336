"""DuckDB-backed store of sweeps, vectors and results.

Every write is one transaction. Results are keyed by (vector, pass, backend, device, dtype) and
inserted with ``INSERT OR IGNORE``, so a resumed or repeated run never records a vector twice.
A file that is not a DuckDB database, or one written by a newer schema, is refused untouched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from opatlas.errors import StoreError
from opatlas.sweep import Vector, params_json

DEFAULT_STORE = "opatlas.duckdb"
SCHEMA_VERSION = 1
STATUSES = ("ok", "invalid", "error", "oom", "timeout", "crash")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id VARCHAR PRIMARY KEY, name VARCHAR, op VARCHAR, source VARCHAR,
    spec_json VARCHAR, created_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS vectors (
    sweep_id VARCHAR, vector_id VARCHAR, idx BIGINT, op VARCHAR, params_json VARCHAR,
    valid BOOLEAN, reason VARCHAR, PRIMARY KEY (sweep_id, vector_id));
CREATE TABLE IF NOT EXISTS results (
    vector_id VARCHAR, op VARCHAR, params_json VARCHAR, pass VARCHAR, backend VARCHAR,
    device VARCHAR, dtype VARCHAR, repeats INTEGER, mean_ns DOUBLE, std_ns DOUBLE,
    median_ns DOUBLE, min_ns DOUBLE, max_ns DOUBLE, flops DOUBLE, min_bytes DOUBLE,
    status VARCHAR, message VARCHAR, versions_json VARCHAR, created_at TIMESTAMP,
    PRIMARY KEY (vector_id, pass, backend, device, dtype));
"""

RESULT_COLUMNS = (
    "vector_id", "op", "params_json", "pass", "backend", "device", "dtype", "repeats",
    "mean_ns", "std_ns", "median_ns", "min_ns", "max_ns", "flops", "min_bytes", "status",
    "message", "versions_json", "created_at",
)


@dataclass
class ResultRow:
    """One measured (or failed) pass of one vector; times in nanoseconds."""

    vector_id: str
    op: str
    params_json: str
    pass_: str
    backend: str
    device: str
    dtype: str
    status: str
    repeats: int = 0
    mean_ns: float | None = None
    std_ns: float | None = None
    median_ns: float | None = None
    min_ns: float | None = None
    max_ns: float | None = None
    flops: float | None = None
    min_bytes: float | None = None
    message: str = ""
    versions_json: str = "{}"
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))

    def as_tuple(self) -> tuple[Any, ...]:
        d = asdict(self)
        d["pass"] = d.pop("pass_")
        return tuple(d[c] for c in RESULT_COLUMNS)


def _looks_like_duckdb(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(16)
    return len(head) >= 12 and head[8:12] == b"DUCK"


class Store:
    """A results store. Use as a context manager, or call :meth:`close`."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_STORE, *, read_only: bool = False):
        self.path = Path(path)
        if self.path.exists() and self.path.stat().st_size > 0 and not _looks_like_duckdb(self.path):
            raise StoreError(f"{self.path} is not a DuckDB file; refusing to open it "
                             f"(it was left untouched)")
        if read_only and not self.path.exists():
            raise StoreError(f"store {self.path} does not exist")
        try:
            self.con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from None
        try:
            self._check_schema(read_only)
        except Exception:
            self.con.close()
            raise

    def _check_schema(self, read_only: bool) -> None:
        tables = {r[0] for r in self.con.execute("SELECT table_name FROM information_schema.tables")
                  .fetchall()}
        if "meta" in tables:
            rows = self.con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchall()
            version = int(rows[0][0]) if rows else 0
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.path} has schema version {version}, newer than this opatlas "
                    f"understands ({SCHEMA_VERSION}); upgrade opatlas. The file was left untouched.")
            if version == SCHEMA_VERSION:
                return
        elif tables and not {"sweeps", "vectors", "results"} <= tables:
            raise StoreError(f"{self.path} is a DuckDB file but not an opatlas store "
                             f"(tables: {sorted(tables)}); it was left untouched")
        if read_only:
            raise StoreError(f"store {self.path} is empty or not initialised")
        with self.transaction():
            self.con.execute(_SCHEMA).fetchall()
            self.con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                             [str(SCHEMA_VERSION)]).fetchall()

    # -- plumbing -----------------------------------------------------------------------------
    def transaction(self) -> _Transaction:
        return _Transaction(self.con)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -------------------------------------------------------------------------------
    def add_sweep(self, sweep_id: str, name: str, op: str, source: str, spec_json: str,
                  vectors: Sequence[Vector], invalid: Sequence[tuple[Vector, str]] = ()) -> None:
        rows = [(sweep_id, v.id, v.index, v.op, params_json(v.params), True, None)
                for v in vectors]
        rows += [(sweep_id, v.id, v.index, v.op, params_json(v.params), False, reason)
                 for v, reason in invalid]
        with self.transaction():
            self.con.execute("INSERT OR IGNORE INTO sweeps VALUES (?, ?, ?, ?, ?, ?)",
                             [sweep_id, name, op, source, spec_json, datetime.now()]).fetchall()
            if rows:
                df = pd.DataFrame(rows, columns=["sweep_id", "vector_id", "idx", "op",
                                                 "params_json", "valid", "reason"])
                self.con.register("_new_vectors", df)
                self.con.execute("INSERT OR IGNORE INTO vectors SELECT * FROM _new_vectors").fetchall()
                self.con.unregister("_new_vectors")

    def add_results(self, rows: Iterable[ResultRow]) -> int:
        """Insert rows in one transaction; rows already present are ignored. Returns the count
        actually inserted."""
        df = pd.DataFrame([r.as_tuple() for r in rows], columns=list(RESULT_COLUMNS))
        if df.empty:
            return 0
        return self._insert_results_df(df)

    def _insert_results_df(self, df: pd.DataFrame) -> int:
        with self.transaction():
            before = self._scalar("SELECT count(*) FROM results")
            self.con.register("_new_results", df[list(RESULT_COLUMNS)])
            cols = ", ".join(f'"{c}"' for c in RESULT_COLUMNS)
            self.con.execute(f"INSERT OR IGNORE INTO results ({cols}) "
                             f"SELECT {cols} FROM _new_results").fetchall()
            self.con.unregister("_new_results")
            after = self._scalar("SELECT count(*) FROM results")
        return int(after - before)

    # -- reads --------------------------------------------------------------------------------
    def done_vector_ids(self, backend: str, device: str, statuses: Sequence[str] | None = None
                        ) -> set[str]:
        sql = "SELECT DISTINCT vector_id FROM results WHERE backend = ? AND device = ?"
        args: list[Any] = [backend, device]
        if statuses:
            sql += f" AND status IN ({', '.join('?' * len(statuses))})"
            args += list(statuses)
        return {r[0] for r in self.con.execute(sql, args).fetchall()}

    def results(self, *, op: str | None = None, where_sql: str | None = None,
                expand_params: bool = True, status: str | None = None,
                limit: int | None = None) -> pd.DataFrame:
        """Result rows (filters and the limit run in DuckDB, so huge stores stay cheap)."""
        sql = "SELECT * FROM results"
        conds, args = [], []
        if op:
            conds.append("op = ?")
            args.append(op)
        if status:
            conds.append("status = ?")
            args.append(status)
        if where_sql:
            conds.append(f"({where_sql})")
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        sql += " ORDER BY op, vector_id, pass"
        if limit:
            sql += f" LIMIT {int(limit)}"
        df = self.con.execute(sql, args).df()
        return expand_param_columns(df) if expand_params else df

    def table(self, name: str) -> pd.DataFrame:
        if name not in ("sweeps", "vectors", "results", "meta"):
            raise StoreError(f"unknown table {name!r}")
        return self.con.execute(f"SELECT * FROM {name}").df()

    def count_results(self, op: str | None = None, status: str | None = None) -> int:
        conds = [c for c, v in (("op = ?", op), ("status = ?", status)) if v]
        args = [v for v in (op, status) if v]
        where = (" WHERE " + " AND ".join(conds)) if conds else ""
        return int(self._scalar(f"SELECT count(*) FROM results{where}", args))

    def count(self, table: str = "results") -> int:
        return int(self._scalar(f"SELECT count(*) FROM {table}"))

    def _scalar(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self.con.execute(sql, list(args)).fetchall()[0][0]

    # -- import / export ----------------------------------------------------------------------
    def export(self, path: str | os.PathLike[str], table: str = "results") -> Path:
        """Write a table to Parquet or CSV (by the file suffix)."""
        path = Path(path)
        df = self.table(table)
        if path.suffix == ".parquet":
            df.to_parquet(path, index=False)
        elif path.suffix == ".csv":
            df.to_csv(path, index=False)
        else:
            raise StoreError(f"export to {path}: use a .parquet or .csv file name")
        return path

    def import_results(self, path: str | os.PathLike[str]) -> int:
        """Read results exported by :meth:`export` (Parquet or CSV); returns rows added."""
        path = Path(path)
        try:
            df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        except Exception as exc:  # pyarrow/pandas raise many types
            raise StoreError(f"cannot read {path}: {exc}") from None
        missing = [c for c in RESULT_COLUMNS if c not in df.columns]
        if missing:
            raise StoreError(f"{path} lacks result column(s) {missing}")
        df["created_at"] = pd.to_datetime(df["created_at"])
        for col in ("message", "versions_json"):  # CSV reads empty strings back as missing
            df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str)
        return self._insert_results_df(df)


def expand_param_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Add one column per vector parameter (from ``params_json``) after the fixed columns."""
    if df.empty or "params_json" not in df:
        return df
    params = pd.DataFrame([json.loads(s) for s in df["params_json"]], index=df.index)
    params = params.drop(columns=[c for c in params.columns if c in df.columns])
    return pd.concat([df, params], axis=1)


class _Transaction:
    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def __enter__(self) -> None:
        self.con.execute("BEGIN TRANSACTION").fetchall()

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.con.execute("ROLLBACK" if exc_type else "COMMIT").fetchall()
