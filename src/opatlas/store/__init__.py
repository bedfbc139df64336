"""The results store: one DuckDB file (default ``opatlas.duckdb`` in the working directory)."""

from opatlas.store.db import DEFAULT_STORE, RESULT_COLUMNS, SCHEMA_VERSION, ResultRow, Store

__all__ = ["DEFAULT_STORE", "RESULT_COLUMNS", "SCHEMA_VERSION", "ResultRow", "Store"]
