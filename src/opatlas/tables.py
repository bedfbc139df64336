"""Where tables go: a ``--csv`` or ``--out`` table path is checked before the work that fills
it (a wrong suffix or a folder costs nothing), and the table is written whole, as CSV or
Parquet by its suffix, with missing folders made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opatlas.errors import OpatlasError

TABLE_SUFFIXES = (".csv", ".csv.gz", ".parquet")
PARQUET_SUFFIXES = (".parquet", ".pq")  # a results export, a store table, an expansion


def _suffix(path: Path) -> str:
    name = path.name.lower()
    return next((s for s in TABLE_SUFFIXES if name.endswith(s)), path.suffix.lower())


def check_table_path(path: str | Path, option: str = "--out") -> Path:
    """``path`` if a table can be written there: a file name ending in .csv, .csv.gz or
    .parquet, not a folder; or ``-``, standard output (as CSV)."""
    path = Path(path)
    if str(path) == "-":
        return path
    if path.is_dir():
        raise OpatlasError(f"{option} {path}: is a folder; give a file name such as "
                           f"{path / 'table.csv'}")
    if _suffix(path) not in TABLE_SUFFIXES:
        raise OpatlasError(f"{option} {path}: unknown table format {path.suffix or '(none)'!r}; "
                           f"use {', '.join(TABLE_SUFFIXES)}")
    return path


def write_table(frame: Any, path: str | Path, option: str = "--out") -> Path:
    """``frame`` (a pandas DataFrame) written whole to ``path`` (``-``: as CSV to standard
    output); errors name the option."""
    from opatlas.atomic import write_output

    path = check_table_path(path, option)
    if str(path) == "-":
        return write_output(path, lambda tmp: frame.to_csv(tmp, index=False), option)
    if _suffix(path) == ".parquet":
        return write_output(path, lambda tmp: frame.to_parquet(tmp, index=False), option)
    compression = "gzip" if _suffix(path) == ".csv.gz" else None
    return write_output(path, lambda tmp: frame.to_csv(tmp, index=False,
                                                       compression=compression), option)
