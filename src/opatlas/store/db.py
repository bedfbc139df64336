"""DuckDB-backed store of sweeps, vectors and results.

Every write is one transaction. Results are keyed by (vector, pass, backend, device, dtype) and
vectors by (sweep, vector); a row whose key the store holds already is ignored (the first write
wins), so a resumed or repeated run never records a row twice.

Schema 2 keeps no primary-key index on ``vectors`` and ``results``: DuckDB holds such indexes in
memory and cannot evict them (0.14 KB a row: 411 MB for a million-vector sweep). Each row has a
``key_hash`` instead, 64 bits of the md5 of its key (:func:`key_hash`), and a write looks up the
batch's hashes (a hash join on 8-byte integers), then compares the full keys of the few rows
that match, so a collision can never drop a distinct row. A schema-1 store is migrated when it is
opened read-write (one transaction; read-only, it is read as it is). A file that is not a DuckDB
database, or one written by a newer schema, is refused untouched.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np
import pandas as pd
import psutil

from opatlas.errors import StoreError
from opatlas.store.keys import KEY_HEX_CHARS, keys_from_halves
from opatlas.sweep import Vector, params_json
from opatlas.tables import PARQUET_SUFFIXES

T = TypeVar("T")

DEFAULT_STORE = "opatlas.duckdb"
SCHEMA_VERSION = 2
STATUSES = ("ok", "invalid", "error", "oom", "timeout", "crash")
MEMORY_LIMIT_ENV = "OPATLAS_STORE_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "64MB"  # a 1M-vector Ray driver: 449 MB peak RSS (256MB: 614 MB)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}

_VECTORS_DDL = """
    sweep_id VARCHAR NOT NULL, vector_id VARCHAR NOT NULL, idx BIGINT, op VARCHAR,
    params_json VARCHAR, valid BOOLEAN, reason VARCHAR, key_hash BIGINT NOT NULL"""
_RESULTS_DDL = """
    vector_id VARCHAR NOT NULL, op VARCHAR, params_json VARCHAR, pass VARCHAR NOT NULL,
    backend VARCHAR NOT NULL, device VARCHAR NOT NULL, dtype VARCHAR NOT NULL, repeats INTEGER,
    mean_ns DOUBLE, std_ns DOUBLE, median_ns DOUBLE, min_ns DOUBLE, max_ns DOUBLE, flops DOUBLE,
    min_bytes DOUBLE, status VARCHAR, message VARCHAR, versions_json VARCHAR,
    created_at TIMESTAMP, key_hash BIGINT NOT NULL"""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id VARCHAR PRIMARY KEY, name VARCHAR, op VARCHAR, source VARCHAR,
    spec_json VARCHAR, created_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS vectors ({_VECTORS_DDL});
CREATE TABLE IF NOT EXISTS results ({_RESULTS_DDL});
"""

RESULT_COLUMNS = (
    "vector_id", "op", "params_json", "pass", "backend", "device", "dtype", "repeats",
    "mean_ns", "std_ns", "median_ns", "min_ns", "max_ns", "flops", "min_bytes", "status",
    "message", "versions_json", "created_at",
)

_ROW_ATTRS = tuple("pass_" if c == "pass" else c for c in RESULT_COLUMNS)


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
        """The row in ``RESULT_COLUMNS`` order. Plain attribute reads: ``dataclasses.asdict``
        deep-copies every field (0.46 s of the Ray driver's CPU per 6,000 rows, profiled)."""
        return tuple(getattr(self, a) for a in _ROW_ATTRS)


def parse_size(text: str, what: str = "size") -> int:
    """Bytes in a size such as ``256MB``, ``1.5 GiB`` or ``1000000`` (bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise StoreError(f"{what} {text!r}: expected a size such as 256MB or 1GiB, or none")
    nbytes = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if nbytes < 2**20:
        raise StoreError(f"{what} {text!r}: too small for DuckDB (at least 1 MiB)")
    return nbytes


_VECTOR_COLUMNS = ("sweep_id", "vector_id", "idx", "op", "params_json", "valid", "reason")
VECTOR_KEY = ("sweep_id", "vector_id")
RESULT_KEY = ("vector_id", "pass", "backend", "device", "dtype")
# statuses that are a vector's answer; any other (error, oom, timeout, crash) is a failure
# that a later row of the same key replaces (--retry-failed, an import of a rerun)
FINAL_STATUSES = ("ok", "invalid")
_ORDER = "_order"  # a batch's row order: within a batch too, the first row of a key wins


def key_hash(*fields: str) -> int:
    """The ``key_hash`` of a key (its fields in the table's key order), as the store computes it
    in SQL (:func:`key_hash_sql`): the first 8 bytes of the md5 of the fields, each after its
    length in bytes and all joined by ``|`` (so two different keys never give the same text),
    read big-endian and shifted into a signed 64-bit integer. md5 keeps it the same in every
    process and DuckDB version (DuckDB's own ``hash()`` may change between versions)."""
    text = "|".join(f"{len(f.encode())}|{f}" for f in fields)
    return int(hashlib.md5(text.encode()).hexdigest()[:16], 16) - 2**63


def key_hash_sql(columns: Sequence[str]) -> str:
    """The SQL expression of :func:`key_hash` over these columns."""
    text = ", ".join(f'strlen("{c}"), "{c}"' for c in columns)
    return (f"CAST(CAST(('0x' || substr(md5(concat_ws('|', {text})), 1, 16))::UBIGINT AS HUGEINT)"
            f" - 9223372036854775808 AS BIGINT)")


def _insert_new_sql(table: str, columns: Sequence[str], key: Sequence[str], batch: str) -> str:
    """Insert the rows of the registered frame ``batch`` whose key ``table`` lacks, each key once
    (its first row in ``_ORDER``); the statement's result is the count inserted.

    Only the batch's hashes are looked up in ``table`` (reading its ``key_hash`` column alone);
    the full keys are read and compared only for rows whose hash is there already."""
    cols, keys = _column_list(columns), _column_list(key)
    same = " AND ".join(f'o."{c}" = n."{c}"' for c in key)
    return (
        f"INSERT INTO {table} ({cols}, key_hash) "
        f"WITH n AS MATERIALIZED (SELECT {cols}, {key_hash_sql(key)} AS key_hash FROM {batch} "
        f"  QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {_ORDER}) = 1), "
        f"hit AS MATERIALIZED (SELECT DISTINCT key_hash FROM {table} "
        f"  WHERE key_hash IN (SELECT key_hash FROM n)), "
        f"old AS MATERIALIZED (SELECT key_hash, {keys} FROM {table} "
        f"  WHERE key_hash IN (SELECT key_hash FROM hit)) "
        f"SELECT {cols}, key_hash FROM n "
        f"WHERE NOT EXISTS (SELECT 1 FROM old o WHERE o.key_hash = n.key_hash AND {same})")


# what a result row measured: an import compares these with a stored row of its key
MEASURED = ("status", "repeats", "mean_ns", "std_ns", "median_ns", "min_ns", "max_ns")
_TIME_RTOL = 1e-9  # older JSON exports (pandas') kept 10 decimals: still read as equal


@dataclass(frozen=True)
class ImportCounts:
    """What an import of exported results did: rows ``added``; rows ``present`` (their key
    was stored, the stored row kept), ``differ`` of them with other measured values; rows
    ``repeated`` within the file (a key an earlier row of it had: the first one counts)."""

    added: int
    present: int = 0
    differ: int = 0
    repeated: int = 0


def _present_sql(batch: str) -> str:
    """Of ``batch``'s rows (each key's first), the count whose key ``results`` holds and the
    count of those that differ in a :data:`MEASURED` value (times within
    :data:`_TIME_RTOL`)."""
    cols, keys = _column_list(RESULT_COLUMNS), _column_list(RESULT_KEY)
    same_key = " AND ".join(f'o."{c}" = n."{c}"' for c in RESULT_KEY)
    same = [f'o."{c}" IS NOT DISTINCT FROM n."{c}"' for c in ("status", "repeats")]
    same += [f'coalesce(abs(o."{c}" - n."{c}") <= {_TIME_RTOL} * greatest(abs(o."{c}"), '
             f'abs(n."{c}")), o."{c}" IS NULL AND n."{c}" IS NULL)' for c in MEASURED[2:]]
    return (f"WITH n AS MATERIALIZED (SELECT {cols}, {key_hash_sql(RESULT_KEY)} AS key_hash "
            f"FROM {batch} QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {_ORDER}) "
            f"= 1) SELECT count(*), count(*) FILTER (WHERE NOT ({' AND '.join(same)})) "
            f"FROM n JOIN results o ON o.key_hash = n.key_hash AND {same_key}")


def _replace_failed_sql(table: str, key: Sequence[str], batch: str) -> str:
    """Delete the failed rows of ``table`` that a row of ``batch`` has the key of and answers:
    any final row (``ok``, ``invalid``), as a re-run's would, however old (an imported part
    may have been measured before this store's attempt failed); a failure only when newer
    (the same rows imported twice replace nothing)."""
    final = ", ".join(f"'{x}'" for x in FINAL_STATUSES)
    same = " AND ".join(f'{table}."{c}" = n."{c}"' for c in key)
    return (f"DELETE FROM {table} WHERE status NOT IN ({final}) "
            f"AND key_hash IN (SELECT {key_hash_sql(key)} FROM {batch}) "
            f"AND EXISTS (SELECT 1 FROM {batch} n WHERE {same} "
            f"AND (n.status IN ({final}) OR n.created_at > {table}.created_at))")


def _vector_frame(sweep_id: str, vectors: Sequence[Vector],
                  invalid: Sequence[tuple[Vector, str]]) -> pd.DataFrame:
    """Rows of the ``vectors`` table: valid vectors, then invalid ones with their reasons."""
    rows = [(sweep_id, v.id, v.index, v.op, params_json(v.params), True, None)
            for v in vectors]
    rows += [(sweep_id, v.id, v.index, v.op, params_json(v.params), False, reason)
             for v, reason in invalid]
    df = pd.DataFrame(rows, columns=list(_VECTOR_COLUMNS))
    df[_ORDER] = np.arange(len(df))
    return df


_TABLES = {  # columns (less key_hash), key, schema-2 columns
    "vectors": (_VECTOR_COLUMNS, VECTOR_KEY, _VECTORS_DDL),
    "results": (RESULT_COLUMNS, RESULT_KEY, _RESULTS_DDL),
}


def _column_list(columns: Sequence[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def _open_failed(path: Path, exc: duckdb.IOException) -> str:
    """Why DuckDB could not open ``path``: a lock held by another process said plainly (with
    its PID when DuckDB names it), any other I/O error as DuckDB put it."""
    text = str(exc)
    if "lock" not in text.lower():
        return f"cannot open store {path}: {text}"
    pid = re.search(r"PID (\d+)", text)
    holder = f", PID {pid.group(1)}" if pid else ""
    return (f"{path} is in use by another opatlas process (or DuckDB client){holder}; wait "
            f"for it or use another --store")


_DISK_FULL = "no space left on device"
# what DuckDB says of a file cut short (a copy stopped early, ``head -c``) or damaged
_DAMAGED = ("could not read enough bytes", "corrupt database file")


def plain_error(path: Path, exc: BaseException) -> StoreError | None:
    """One line for a DuckDB or OS error that is the environment's, not a bug: a full disk
    (DuckDB rolled the write back, or gave up the database, before anything of it was
    recorded) or a store file cut short or damaged; None for any other."""
    text = str(exc)
    detail = text.splitlines()[0] if text else type(exc).__name__
    if _DISK_FULL in text.lower() or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return StoreError(f"store {path}: no space left on device ({detail}); the rows "
                          f"recorded before this write are kept: free some space, then run the "
                          f"same command again")
    if any(s in text.lower() for s in _DAMAGED):
        return StoreError(f"cannot open store {path}: Corrupt database file (it is cut short "
                          f"or damaged: {detail}); it was left untouched")
    return None


@contextlib.contextmanager
def plain_errors(path: Path) -> Iterator[None]:
    """Within it, the errors :func:`plain_error` knows are raised as that one line."""
    try:
        yield
    except (duckdb.Error, OSError) as exc:
        if (plain := plain_error(path, exc)) is None:
            raise
        raise plain from None


def _interrupted(exc: BaseException) -> bool:
    """Whether DuckDB stopped a query for Ctrl-C: an ``InterruptException``, or (a SIGINT
    during a query) a bare ``RuntimeError('Query interrupted')``."""
    return isinstance(exc, duckdb.InterruptException) or (
        type(exc) is RuntimeError and "interrupted" in str(exc).lower())


def _looks_like_duckdb(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(16)
    return len(head) >= 12 and head[8:12] == b"DUCK"


_PARAM_VALUE = """json_extract_string(params_json, '$."' || k || '"')"""
# a row's parameters in its own order (the spec's), each a number where it is one, so that
# dim 512 sorts before 1024 and role="qkv" by its text: lists and structs compare in order
PARAMS_ORDER = (f"[{{'n': TRY_CAST({_PARAM_VALUE} AS DOUBLE), 's': {_PARAM_VALUE}}} "
                f"for k in json_keys(params_json)]")


class Store:
    """A results store. Use as a context manager, or call :meth:`close`."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_STORE, *, read_only: bool = False):
        self.path = Path(path)
        self.memory_limit: int | None = None  # bytes, when set by limit_memory
        self.schema_version = SCHEMA_VERSION  # 1 for a schema-1 store opened read-only
        self.last_import: ImportCounts | None = None  # what the last import_results did
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a folder; a store is a DuckDB file (e.g. "
                             f"{self.path / 'opatlas.duckdb'})")
        if self.path.exists() and self.path.stat().st_size == 0:
            raise StoreError(f"{self.path} is empty (0 bytes), not a DuckDB store; remove it "
                             f"or use another --store (it was left untouched)")
        if self.path.exists() and not _looks_like_duckdb(self.path):
            raise StoreError(f"{self.path} is not a DuckDB file; refusing to open it "
                             f"(it was left untouched)")
        if read_only and not self.path.exists():
            raise StoreError(f"store {self.path} does not exist")
        try:
            with plain_errors(self.path):
                self.con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.IOException as exc:
            raise StoreError(_open_failed(self.path, exc)) from None
        except duckdb.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from None
        try:
            with plain_errors(self.path):
                self._check_schema(read_only)
        except Exception:
            with contextlib.suppress(duckdb.Error):
                self.con.close()
            raise

    def _check_schema(self, read_only: bool) -> None:
        tables = {r[0] for r in self.con.execute("SELECT table_name FROM information_schema.tables")
                  .fetchall()}
        version = 0
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
            if version == 1:  # read as it is: its reads name their columns, as in schema 2
                self.schema_version = 1
                return
            raise StoreError(f"store {self.path} is empty or not initialised")
        old = [t for t in ("vectors", "results") if t in tables and "key_hash" not in
               {r[0] for r in self.con.execute(
                   "SELECT column_name FROM information_schema.columns WHERE table_name = ?",
                   [t]).fetchall()}]
        if old:
            print(f"opatlas: migrating the store {self.path} from schema {version} to "
                  f"{SCHEMA_VERSION} (a key hash in place of the primary-key indexes of "
                  f"{' and '.join(old)}, which DuckDB keeps in memory); one transaction",
                  file=sys.stderr, flush=True)
        try:
            with self.transaction():
                for table in old:
                    self._migrate(table)
                self.con.execute(_SCHEMA).fetchall()
                self.con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                                 [str(SCHEMA_VERSION)]).fetchall()
        except duckdb.Error as exc:
            if not old:
                raise
            raise StoreError(f"cannot migrate the store {self.path} from schema {version} to "
                             f"{SCHEMA_VERSION}: {exc}. It was left as it was (the migration was "
                             f"rolled back), and what only reads it (opatlas results, fit, analyze) still can"
                             ) from None
        if old:
            self.con.execute("CHECKPOINT").fetchall()  # frees the old tables' blocks

    def _migrate(self, table: str) -> None:
        """Rebuild a schema-1 table (a primary key, no ``key_hash``) in schema 2, in the open
        transaction. Its primary key held each key once, so its rows are copied as they are."""
        columns, key, ddl = _TABLES[table]
        cols = _column_list(columns)
        new = f"_{table}_v{SCHEMA_VERSION}"
        self.con.execute(f"CREATE TABLE {new} ({ddl})").fetchall()
        self.con.execute(f"INSERT INTO {new} ({cols}, key_hash) "
                         f"SELECT {cols}, {key_hash_sql(key)} FROM {table}").fetchall()
        self.con.execute(f"DROP TABLE {table}").fetchall()
        self.con.execute(f"ALTER TABLE {new} RENAME TO {table}").fetchall()

    # -- plumbing -----------------------------------------------------------------------------
    def transaction(self) -> _Transaction:
        """A context manager holding one transaction: its writes are committed together on
        a normal exit, rolled back on an exception (``with store.transaction(): ...``)."""
        return _Transaction(self.con)

    def close(self) -> None:
        with plain_errors(self.path):
            self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
            return
        with contextlib.suppress(duckdb.Error):  # a database DuckDB gave up: say the first error
            self.con.close()

    # -- writes -------------------------------------------------------------------------------
    def add_sweep(self, sweep_id: str, name: str, op: str, source: str, spec_json: str,
                  vectors: Sequence[Vector] = (), invalid: Sequence[tuple[Vector, str]] = ()
                  ) -> None:
        """Record a sweep (once), with these of its vectors (a run adds the rest batch by batch
        with :meth:`add_vectors`)."""
        def write() -> None:
            self.con.execute("INSERT OR IGNORE INTO sweeps VALUES (?, ?, ?, ?, ?, ?)",
                             [sweep_id, name, op, source, spec_json, datetime.now()]).fetchall()
            self._insert_new("vectors", "_new_vectors")

        self._write(write, _new_vectors=_vector_frame(sweep_id, vectors, invalid))

    def add_vectors(self, sweep_id: str, vectors: Sequence[Vector],
                    invalid: Sequence[tuple[Vector, str]] = ()) -> None:
        """Record one batch of a sweep's vectors (valid, and invalid with their reasons) in one
        transaction; vectors the store holds already are ignored."""
        if vectors or invalid:
            self._write(lambda: self._insert_new("vectors", "_new_vectors"),
                        _new_vectors=_vector_frame(sweep_id, vectors, invalid))

    def add_results(self, rows: Iterable[ResultRow]) -> int:
        """Insert rows in one transaction; rows whose key is recorded already are ignored,
        except that a failed row (status not in ``FINAL_STATUSES``) is replaced by a final
        row, or by a newer failure: a vector run again after an error keeps its new outcome.
        Returns the count inserted."""
        df = pd.DataFrame([r.as_tuple() for r in rows], columns=list(RESULT_COLUMNS))
        if df.empty:
            return 0
        return self._insert_results_df(df)

    def _insert_results_df(self, df: pd.DataFrame, present: list[int] | None = None) -> int:
        """Insert ``df``'s rows (:meth:`add_results`); ``present``, when given, is filled with
        the counts of those kept out because the store holds their key, and of those with
        other measured values (:func:`_present_sql`), in the same transaction."""
        batch = df[list(RESULT_COLUMNS)].assign(**{_ORDER: np.arange(len(df))})

        def replace_failed_then_insert() -> int:
            self._check_writable()
            self.con.execute(_replace_failed_sql("results", RESULT_KEY, "_new_results"))
            if present is not None:
                present[:] = self.con.execute(_present_sql("_new_results")).fetchall()[0]
            return self._insert_new("results", "_new_results")

        return self._write(replace_failed_then_insert, _new_results=batch)

    def _insert_new(self, table: str, batch: str) -> int:
        """Insert the rows of the registered frame ``batch`` whose keys ``table`` lacks
        (:func:`_insert_new_sql`); returns the count inserted."""
        self._check_writable()
        columns, key, _ = _TABLES[table]
        return int(self._scalar(_insert_new_sql(table, columns, key, batch)))

    def _check_writable(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise StoreError(f"store {self.path} has schema {self.schema_version}: opened "
                             f"read-only, it cannot be written")

    def _write(self, fn: Callable[[], T], **views: pd.DataFrame) -> T:
        """``fn`` in one transaction, with ``views`` registered (by name) around it. When DuckDB
        runs out of its memory limit, the transaction was rolled back: it runs again
        (:meth:`_with_memory`), so nothing is lost or written twice."""
        return self._with_memory(lambda: self._in_transaction(fn, views))

    def _in_transaction(self, fn: Callable[[], T], views: dict[str, pd.DataFrame]) -> T:
        """Views are registered outside the transaction: an aborted one could not drop them.
        A failed write's views are dropped quietly: DuckDB may have given up the database (a
        full disk), and the write's own error is the one to say."""
        for name, df in views.items():
            self.con.register(name, df)
        try:
            with self.transaction():
                result = fn()
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self._unregister(views)
            raise
        self._unregister(views)
        return result

    def _unregister(self, views: dict[str, pd.DataFrame]) -> None:
        for name in views:
            self.con.unregister(name)

    def _with_memory(self, fn: Callable[[], T]) -> T:
        """``fn()``, run again with a higher memory limit while DuckDB runs out of it.

        The store keeps no index that DuckDB cannot evict (schema 2), so a sweep's writes
        fit a fixed limit; this is the safety net for one that does not (a huge import): failing
        the sweep then would be worse than growing. A query stopped by Ctrl-C (rolled back)
        is a ``KeyboardInterrupt``, as anywhere else, for the commands to report; a full disk
        or a damaged file is one line (:func:`plain_error`)."""
        with plain_errors(self.path):
            while True:
                try:
                    return fn()
                except duckdb.OutOfMemoryException:
                    if not self._raise_memory_limit():
                        raise
                except Exception as exc:
                    if _interrupted(exc):
                        raise KeyboardInterrupt from None
                    raise

    # -- memory -------------------------------------------------------------------------------
    def limit_memory(self, limit: str | None = None) -> None:
        """Cap DuckDB's buffer cache for a long sweep, so that the driver's memory does not
        grow with the results table: ``limit`` (e.g. ``"256MB"``), else the environment's
        ``OPATLAS_STORE_MEMORY_LIMIT``, else 64 MB; ``none`` keeps DuckDB's default (80% of
        RAM). It doubles when a write needs more (:meth:`_with_memory`)."""
        text = (limit or os.environ.get(MEMORY_LIMIT_ENV) or DEFAULT_MEMORY_LIMIT).strip()
        if text.lower() == "none":
            self.con.execute("RESET memory_limit").fetchall()
            self.memory_limit = None
            return
        self._set_memory_limit(parse_size(text, MEMORY_LIMIT_ENV if limit is None else "limit"))

    def _set_memory_limit(self, nbytes: int) -> None:
        self.con.execute(f"SET memory_limit = '{nbytes}B'").fetchall()
        self.memory_limit = nbytes

    def _raise_memory_limit(self) -> bool:
        """Double the memory limit (up to 80% of RAM, DuckDB's default); False when no limit
        was set here or it cannot grow."""
        ceiling = int(0.8 * psutil.virtual_memory().total)
        if self.memory_limit is None or self.memory_limit >= ceiling:
            return False
        new = min(2 * self.memory_limit, ceiling)
        print(f"opatlas: the store {self.path.name} needs more than its memory limit of "
              f"{self.memory_limit / 2**20:,.0f} MB; raised to "
              f"{new / 2**20:,.0f} MB ({MEMORY_LIMIT_ENV} sets the start)", file=sys.stderr)
        self._set_memory_limit(new)
        return True

    # -- reads --------------------------------------------------------------------------------
    def done_vector_ids(self, backend: str, device: str, statuses: Sequence[str] | None = None
                        ) -> set[str]:
        """The ids of the vectors the results table holds a row of for ``backend`` on
        ``device`` (the device's name as the backend reports it); with ``statuses``, only rows
        of those statuses (``("ok", "invalid")``: the ones a resume keeps)."""
        sql = "SELECT DISTINCT vector_id FROM results WHERE backend = ? AND device = ?"
        args: list[Any] = [backend, device]
        if statuses:
            sql += f" AND status IN ({', '.join('?' * len(statuses))})"
            args += list(statuses)
        return {r[0] for r in self.con.execute(sql, args).fetchall()}

    def ops(self) -> list[str]:
        """The ops the results table holds, sorted."""
        rows = self._with_memory(
            lambda: self.con.execute("SELECT DISTINCT op FROM results ORDER BY op").fetchall())
        return [r[0] for r in rows]

    def done_keys(self, backend: str, device: str, statuses: Sequence[str] | None = None,
                  passes: Sequence[str] = ()) -> np.ndarray:
        """The keys (:mod:`opatlas.store.keys`) of the vectors recorded for (backend, device),
        sorted; only those with ``statuses`` when given. With ``passes``, a vector is done
        only when it has a row (of those statuses) for every one of them: one interrupted
        between its passes, or run before with fewer passes, is not. Read as two 64-bit
        halves, so a million done vectors cost 16 MB and no Python object each."""
        half = "try_cast('0x' || substr(vector_id, {}, 16) AS UBIGINT)"
        sql = (f"SELECT {half.format(1)} AS hi, {half.format(17)} AS lo, pass FROM results "
               f"WHERE backend = ? AND device = ? AND length(vector_id) >= {KEY_HEX_CHARS}")
        args: list[Any] = [backend, device]
        if statuses:
            sql += f" AND status IN ({', '.join('?' * len(statuses))})"
            args += list(statuses)
        wanted = sorted(set(passes))
        if wanted:
            sql += f" AND pass IN ({', '.join('?' * len(wanted))})"
            args += wanted
        sql = f"SELECT hi, lo FROM ({sql}) WHERE hi IS NOT NULL AND lo IS NOT NULL"  # sha224 ids
        if wanted:  # the halves, not the id strings: a cheaper hash aggregate
            sql += f" GROUP BY hi, lo HAVING count(DISTINCT pass) = {len(wanted)}"
        cols = self._with_memory(lambda: self.con.execute(sql, args).fetchnumpy())
        return keys_from_halves(np.asarray(cols["hi"]), np.asarray(cols["lo"]))

    def keys_by_status(self, backend: str, device: str, statuses: Sequence[str]
                       ) -> dict[str, np.ndarray]:
        """Per status of ``statuses``, the sorted keys of the vectors with a row of that
        status for (backend, device): what a resumed run skips without saying why (a vector
        whose passes failed differently is under each of their statuses)."""
        if not statuses:
            return {}
        half = "try_cast('0x' || substr(vector_id, {}, 16) AS UBIGINT)"
        sql = (f"SELECT * FROM (SELECT DISTINCT {half.format(1)} AS hi, {half.format(17)} AS lo, "
               f"status FROM results WHERE backend = ? AND device = ? "
               f"AND length(vector_id) >= {KEY_HEX_CHARS} "
               f"AND status IN ({', '.join('?' * len(statuses))})) "
               f"WHERE hi IS NOT NULL AND lo IS NOT NULL")
        args = [backend, device, *statuses]
        cols = self._with_memory(lambda: self.con.execute(sql, args).fetchnumpy())
        status = np.asarray(cols["status"], dtype=object)
        hi, lo = np.asarray(cols["hi"]), np.asarray(cols["lo"])
        return {s: keys_from_halves(hi[status == s], lo[status == s]) for s in statuses}

    def settings_of(self, backend: str, device: str, keys: np.ndarray, passes: Sequence[str]
                    ) -> list[tuple[int, str, int]]:
        """How the ``ok`` rows of these vectors (``keys``: :mod:`opatlas.store.keys`) and
        ``passes`` were measured on (backend, device): (repeats, versions_json, vectors) for
        each pair of values found, the most vectors first."""
        if not len(keys) or not passes:
            return []
        halves = np.frombuffer(np.ascontiguousarray(keys).tobytes(), dtype=">u8").reshape(-1, 2)
        frame = pd.DataFrame({"hi": halves[:, 0].astype(np.uint64),
                              "lo": halves[:, 1].astype(np.uint64)})
        half = "try_cast('0x' || substr(r.vector_id, {}, 16) AS UBIGINT)"
        sql = (f"SELECT r.repeats, r.versions_json, count(DISTINCT r.vector_id) AS n "
               f"FROM results r JOIN _keys k ON k.hi = {half.format(1)} "
               f"AND k.lo = {half.format(17)} WHERE r.backend = ? AND r.device = ? "
               f"AND r.status = 'ok' AND r.pass IN ({', '.join('?' * len(passes))}) "
               f"GROUP BY ALL ORDER BY n DESC, r.repeats, r.versions_json")

        def read() -> list[tuple[int, str, int]]:
            self.con.register("_keys", frame)
            try:
                rows = self.con.execute(sql, [backend, device, *passes]).fetchall()
            finally:
                self.con.unregister("_keys")
            return [(int(r or 0), str(v), int(n)) for r, v, n in rows]

        return self._with_memory(read)

    def results(self, *, op: OpSelection = None, where_sql: str | None = None,
                expand_params: bool = True, status: str | None = None,
                limit: int | None = None, params: ParamFilter | None = None,
                by_params: bool = False) -> pd.DataFrame:
        """Result rows (filters and the limit run in DuckDB, so huge stores stay cheap);
        ``op``: one op, or any of several; ``params``: only rows whose parameters have these
        values (:class:`ParamFilter`).
        Ordered by op, vector id and pass; ``by_params``: by op, pass and the parameters
        (:data:`PARAMS_ORDER`), then backend and device, as a reader looks for a shape."""
        sql = f"SELECT {_column_list(RESULT_COLUMNS)} FROM results"
        conds, args = _result_conditions(op, status, params)
        if where_sql:
            conds.append(f"({where_sql})")
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        sql += (f" ORDER BY op, pass, {PARAMS_ORDER}, backend, device, vector_id" if by_params
                else " ORDER BY op, vector_id, pass")
        if limit:
            sql += f" LIMIT {int(limit)}"
        df = self._with_memory(lambda: self.con.execute(sql, args).df())
        return expand_param_columns(df) if expand_params else df

    def table(self, name: str) -> pd.DataFrame:
        """A whole table as a DataFrame: ``sweeps``, ``vectors``, ``results`` (parameters as
        JSON text; :meth:`results` spreads them into columns) or ``meta``. Another name
        raises :class:`StoreError`."""
        if name not in ("sweeps", "vectors", "results", "meta"):
            raise StoreError(f"unknown table {name!r}")
        cols = _column_list(_TABLES[name][0]) if name in _TABLES else "*"  # not key_hash
        return self._with_memory(lambda: self.con.execute(f"SELECT {cols} FROM {name}").df())

    def count_results(self, op: OpSelection = None, status: str | None = None,
                      params: ParamFilter | None = None) -> int:
        conds, args = _result_conditions(op, status, params)
        where = (" WHERE " + " AND ".join(conds)) if conds else ""
        return int(self._scalar(f"SELECT count(*) FROM results{where}", args))

    def count(self, table: str = "results") -> int:
        """The number of rows of ``table`` (``results``, ``vectors``, ``sweeps`` or ``meta``);
        :meth:`count_results` counts results of one op or status."""
        return int(self._scalar(f"SELECT count(*) FROM {table}"))

    def _scalar(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """One value; no memory retry here: a write calls it inside its transaction."""
        with plain_errors(self.path):
            return self.con.execute(sql, list(args)).fetchall()[0][0]

    # -- import / export ----------------------------------------------------------------------
    def export(self, path: str | os.PathLike[str], table: str = "results") -> Path:
        """Write a table to Parquet or CSV (by the file suffix)."""
        path = Path(path)
        df = self.table(table)
        suffix = path.suffix.lower()
        if suffix in PARQUET_SUFFIXES:
            df.to_parquet(path, index=False)
        elif suffix == ".csv":
            df.to_csv(path, index=False)
        else:
            raise StoreError(f"export to {path}: use a .parquet, .pq or .csv file name")
        return path

    def import_results_counted(self, path: str | os.PathLike[str]) -> ImportCounts:
        """:meth:`import_results`, and what it did not add, and why (:class:`ImportCounts`)."""
        added = self.import_results(path)
        return self.last_import or ImportCounts(added=added)

    def import_results(self, path: str | os.PathLike[str]) -> int:
        """Read results exported by :meth:`export` (Parquet, CSV or JSON); returns rows added,
        and keeps all its counts in ``last_import``.

        The file is checked whole first (:func:`opatlas.store.checks.check_results`): a bad
        one is refused, naming its first bad row, and nothing of it is written. Its final
        rows (``ok``, ``invalid``) replace failures stored for their keys, as a re-run's
        would, and come first within the file too. A row whose key the store holds otherwise
        is not added (the stored one is kept), and counted, as are those of them that
        measured other values."""
        self.last_import = self._import_results(Path(path))
        return self.last_import.added

    def _import_results(self, path: Path) -> ImportCounts:
        from opatlas.store.checks import check_results

        df = read_exported(path)
        if df.empty and not len(df.columns):  # an empty JSON export ([]) names no columns
            return ImportCounts(added=0)
        missing = [c for c in RESULT_COLUMNS if c not in df.columns]
        if missing:
            raise StoreError(f"{path} lacks result column(s) {missing}")
        df = check_results(df.reset_index(drop=True), Path(path), STATUSES)
        for col in ("message", "versions_json"):  # CSV reads empty strings back as missing
            df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str)
        failed = (~df["status"].isin(FINAL_STATUSES)).to_numpy()
        df = df.iloc[np.argsort(failed, kind="stable")]  # within the file, answers win too
        present: list[int] = []
        added = self._insert_results_df(df, present)
        return ImportCounts(added=added, present=present[0], differ=present[1],
                            repeated=int(df.duplicated(list(RESULT_KEY)).sum()))


@dataclass(frozen=True)
class ParamFilter:
    """Result rows whose ``params_json`` sets each of ``values``; a row that leaves a key out
    matches when ``defaults`` gives that key the value asked for (the op's default)."""

    values: Mapping[str, Any]
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def conditions(self) -> tuple[list[str], list[Any]]:
        conds: list[str] = []
        args: list[Any] = []
        for key, value in self.values.items():
            path = f'$."{key}"'  # parameter names are identifiers
            cond = "json_extract(params_json, ?)::VARCHAR = ?"
            args += [path, json.dumps(value, separators=(",", ":"))]
            if key in self.defaults and self.defaults[key] == value:
                cond = f"({cond} OR json_extract(params_json, ?) IS NULL)"
                args.append(path)
            conds.append(cond)
        return conds, args


OpSelection = str | Sequence[str] | None  # one op, several (aliases of one), or all


def _result_conditions(op: OpSelection, status: str | None, params: ParamFilter | None
                       ) -> tuple[list[str], list[Any]]:
    """SQL conditions (and their arguments) for rows of ``op`` (one name, or any of several),
    of ``status``, and matching ``params``."""
    ops = [op] if isinstance(op, str) else list(op or [])
    conds: list[str] = []
    args: list[Any] = []
    if ops:
        conds.append(f"op IN ({', '.join('?' * len(ops))})")
        args += ops
    if status:
        conds.append("status = ?")
        args.append(status)
    if params is not None:
        more, more_args = params.conditions()
        conds += more
        args += more_args
    return conds, args


def read_exported(path: Path) -> pd.DataFrame:
    """A results table exported by ``opatlas results`` (.parquet or .pq, .csv or .json)."""
    if not path.is_file():
        raise StoreError(f"{path}: no such file" + (" (a folder)" if path.is_dir() else ""))
    if _looks_like_duckdb(path):
        raise StoreError(f"{path} is a store, not an export: export it first (opatlas results "
                         f"--store {path} --format parquet --out part.parquet)")
    readers: dict[str, Callable[[Path], pd.DataFrame]] = {
        **dict.fromkeys(PARQUET_SUFFIXES, pd.read_parquet), ".json": _read_json_records,
        ".csv": pd.read_csv}
    suffix = path.suffix.lower()
    if suffix not in readers:
        raise StoreError(f"{path}: expected a .parquet (or .pq), .csv or .json file written "
                         f"by opatlas results")
    try:
        return readers[suffix](path)
    except StoreError:
        raise
    except Exception as exc:  # pyarrow/pandas raise many types
        raise StoreError(f"cannot read {path} as {suffix[1:]}: {exc}") from None


def _read_json_records(path: Path) -> pd.DataFrame:
    """A JSON export: a list of result records (objects), read with Python's ``json``, so
    every number comes back as written (pandas' reader rounds floats to 15 digits). Anything
    else (an object, ``null``, a list of non-objects) is refused in one line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StoreError(f"cannot read {path} as json: {exc}") from None
    if not isinstance(data, list):
        got = _json_kind(data)
    elif (odd := [r for r in data if not isinstance(r, dict)]):
        got = f"a list holding {_json_kind(odd[0])}"
    else:
        return pd.DataFrame.from_records(data) if data else pd.DataFrame()
    raise StoreError(f"{path}: not a results export: expected a JSON list of result records "
                     f"(objects), got {got}")
    return pd.DataFrame.from_records(data) if data else pd.DataFrame()


def _json_kind(value: object) -> str:
    """How a JSON value reads in an error: ``an object``, ``null``, ``a number`` ..."""
    if value is None:
        return "null"
    kinds = ((dict, "an object"), (list, "a list"), (str, "a string"), (bool, "a boolean"),
             (int | float, "a number"))
    return next(k for t, k in kinds if isinstance(value, t))


def expand_param_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Add one column per vector parameter (from ``params_json``) after the fixed columns.

    A parameter whose values are all integers stays integer, also where some rows lack it
    (several ops in one store): pandas' nullable ``Int64`` there, where a plain frame would
    turn the column into floats (``dim`` 512.0 in a CSV or JSON export)."""
    if df.empty or "params_json" not in df:
        return df
    records = [json.loads(s) for s in df["params_json"]]
    params = pd.DataFrame(records, index=df.index)
    params = params.drop(columns=[c for c in params.columns if c in df.columns])
    for col in params.columns:
        if (ints := _int_column(records, col)) is not None:
            params[col] = ints
    return pd.concat([df, params], axis=1)


def _int_column(records: Sequence[Mapping[str, Any]], key: str
                ) -> pd.api.extensions.ExtensionArray | None:
    """``key``'s values as integers (``Int64``, missing where a record lacks it or holds
    null), or None unless every value given is an integer (a bool is not)."""
    values = [r.get(key) for r in records]
    if not all(v is None or type(v) is int for v in values):
        return None
    try:
        return pd.array(values, dtype="Int64" if None in values else "int64")
    except (OverflowError, TypeError):  # beyond 64 bits: left as pandas reads them
        return None


class _Transaction:
    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def __enter__(self) -> None:
        self.con.execute("BEGIN TRANSACTION").fetchall()

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if not exc_type:
            self.con.execute("COMMIT").fetchall()
            return
        with contextlib.suppress(duckdb.Error):  # given up (a full disk): the first error counts
            self.con.execute("ROLLBACK").fetchall()
