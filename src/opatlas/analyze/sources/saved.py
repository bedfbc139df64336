"""An analysis kept with ``--save``: ``opatlas analyze a.json`` opens it like ``--load``.

The file's layout is validated by :meth:`Analysis.load`; its rows are free-form mappings (each
source has its own columns), so their figures are checked here, at the boundary: a value every
view does arithmetic on that is not a number (``"abc"``), not finite, or negative where only a
count or a time can be, is one line naming the file, the row and the key, not a traceback in
a view."""

from __future__ import annotations

import math
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype

from opatlas.analyze.model import Analysis
from opatlas.analyze.sources import ReadOptions, SourceKind, register
from opatlas.errors import OpatlasError

# on every row, a number: what the row takes and how often
NEEDED = ("time_s", "calls")
# a number or null (none) on every row that has them, and never negative: counts, times
COUNTED = ("flops", "bytes", "bound_time_s")
# the column roles whose values are numbers or null; the first ones never negative (counts,
# seconds, rates); a ratio, a util or an error may be (an error is signed), and a "time"
# column may be a gap between ops (tt-metal's op-to-op gap)
NON_NEGATIVE_ROLES = frozenset({"count", "measured", "estimated", "bound", "rate"})
NUMBER_ROLES = NON_NEGATIVE_ROLES | {"time", "util", "ratio", "error"}
# the summary's figures the views compute with: a number or null (a key ending in "_s" or
# "_bytes" holding a mapping or a list, such as PyBuda's group_times_s, is not one figure)
SUMMARY_NUMBERS = ("utilization", "estimation_error", "throughput", "memory_gib")
SUMMARY_SUFFIXES = ("_s", "_bytes", "_hz")


def detect(path: Path) -> bool:
    if path.suffix != ".json" or not path.is_file():
        return False
    with path.open("rb") as fh:
        return b'"opatlas-analysis"' in fh.read(256)


def read(path: Path, options: ReadOptions) -> Analysis:
    return load(path)


def load(path: str | Path) -> Analysis:
    """The analysis saved in ``path``, its figures checked (:func:`check`)."""
    analysis = Analysis.load(path)
    check(analysis, Path(path))
    return analysis


def check(analysis: Analysis, path: Path) -> None:
    """Raise OpatlasError naming the first bad figure of ``analysis`` (read from ``path``)."""
    _check_summary(analysis.summary, path)
    rows = analysis.rows
    roles = {c.key: c.role for c in analysis.columns}
    for key in dict.fromkeys([*NEEDED, *COUNTED, *(k for k, r in roles.items()
                                                   if r in NUMBER_ROLES)]):
        if key not in rows.columns:
            continue  # a column no row has: Analysis says the required ones
        needed = key in NEEDED
        signed = key not in NEEDED + COUNTED and roles.get(key) not in NON_NEGATIVE_ROLES
        for i in _suspects(rows[key], needed, signed):
            value = rows.at[i, key]
            if (why := _bad(value, needed, signed)) is not None:
                raise OpatlasError(f"{path}: rows[{i}].{key}{_row_name(rows.loc[i])} is "
                                   f"{_shown(value)}: {why}; not an analysis as --save "
                                   f"writes it")


def _suspects(values: pd.Series, needed: bool, signed: bool) -> Any:
    """The index of the values :func:`_bad` must look at: in a numeric column (a saved file
    of 10^5 rows), only the missing, infinite or negative ones; in any other, every one."""
    if not is_numeric_dtype(values) or is_bool_dtype(values):
        return values.index
    v = values.to_numpy(float)
    odd = np.isinf(v) | (np.isnan(v) if needed else False) | ((v < 0) if not signed else False)
    return values.index[odd]


def _bad(value: Any, needed: bool, signed: bool) -> str | None:
    """Why ``value`` cannot be the figure (None: it can): ``needed``: null is no figure;
    ``signed``: it may be negative."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, Real | None):
        return "not a number"
    if value is None or math.isnan(value):
        return "every row needs this number" if needed else None
    if not math.isfinite(value):
        return "not a finite number"
    if value < 0 and not signed:
        return "negative, but it counts or times something"
    return None


def _check_summary(summary: dict[str, Any], path: Path) -> None:
    total = summary.get("total_time_s")
    if "total_time_s" in summary and (why := _bad(total, True, False)) is not None:
        raise OpatlasError(f"{path}: summary.total_time_s is {_shown(total)}: {why}; not an "
                           f"analysis as --save writes it")
    for key, value in summary.items():
        figure = key in SUMMARY_NUMBERS or key.endswith(SUMMARY_SUFFIXES)
        if figure and not isinstance(value, dict | list) \
                and (why := _bad(value, False, True)) is not None:
            raise OpatlasError(f"{path}: summary.{key} is {_shown(value)}: {why}; not an "
                               f"analysis as --save writes it")


def _row_name(row: pd.Series) -> str:
    """`` (op pass)``: which row, in words, where the row names its op."""
    words = [str(row[k]) for k in ("op", "pass") if k in row and isinstance(row[k], str)]
    return f" ({' '.join(words)})" if words else ""


def _shown(value: Any) -> str:
    """``value`` as the file wrote it (JSON's null for none, a number without numpy's type)."""
    if value is None or (isinstance(value, Real) and math.isnan(value)):
        return "null"
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else f"{text[:37]}..."


register(SourceKind("analysis", detect, read, "an analysis kept with --save (.json)"))
