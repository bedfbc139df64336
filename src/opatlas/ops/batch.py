"""Evaluate an op's analytical counts and features for a whole table of shapes at once.

The catalog's formulas take scalars or numpy arrays (see ``opatlas.ops.base.I``), so a table of
N shapes costs a handful of numpy operations per formula instead of N Python calls. Rows are
grouped by their non-numeric parameters (dtype, role, ...) first. ``count_columns`` works on
:mod:`opatlas.columns` tables (numpy only, the estimator's path); ``batch_counts`` is the same
for a pandas DataFrame.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from opatlas.columns import Columns, as_columns, distinct_rows, is_numeric, n_rows, to_frame
from opatlas.ops.base import DEFAULT_DTYPE
from opatlas.ops.registry import get_op

KEY_COLUMNS = ("dtype", "role", "stage")  # always group keys, even when they hold numbers


def count_columns(op_name: str, shapes: Any, **given: Any) -> Columns:
    """Per row: ``flops_<pass>``, ``bytes_<pass>`` and every feature of the op. ``given``:
    parameters with one value for every row (``dtype="fp16"``), overriding any column."""
    op, fixed = get_op(op_name)
    table = {k: v for k, v in as_columns(shapes).items() if k not in given}
    n = n_rows(table)
    consts = {k: v for k, v in {"dtype": DEFAULT_DTYPE, **op.defaults, **fixed, **given}.items()
              if k not in table}
    keys = [c for c, v in table.items() if c in KEY_COLUMNS or not is_numeric(v)]
    varying = [k for k in keys if not _constant(table[k])]
    first, codes = distinct_rows({k: table[k] for k in varying}) if varying else \
        (np.zeros(min(n, 1), dtype=np.int64), np.zeros(n, dtype=np.int64))
    out: Columns = {}
    for g, start in enumerate(first):
        rows = slice(None) if len(first) == 1 else np.flatnonzero(codes == g)
        p: dict[str, Any] = {k: v[start] if k in keys else v[rows] for k, v in table.items()}
        p.update(consts)
        m = n if len(first) == 1 else len(rows)
        for name, v in _group_counts(op, p, m).items():
            col = np.broadcast_to(np.asarray(v, dtype=np.float64), (m,))
            if len(first) == 1:
                out[name] = col
            else:
                out.setdefault(name, np.full(n, np.nan))[rows] = col
    return out


def _counts(op: Any, p: dict[str, Any]) -> dict[str, Any]:
    return {**{f"{name}_{pass_}": v for name, fn in (("flops", op.flops),
                                                     ("bytes", op.min_bytes))
               for pass_, v in fn(p).items()}, **op.features(p)}


def _group_counts(op: Any, p: dict[str, Any], m: int) -> dict[str, Any]:
    """The counts of one group of ``m`` rows, its numbers as arrays: at once where the op's
    formulas take arrays (the catalog's do), else row by row (a user op written for scalars,
    e.g. ``float(p["n"])``, still gets its counts, only slower)."""
    try:
        return _counts(op, p)
    except (TypeError, ValueError):
        arrays = [k for k, v in p.items() if isinstance(v, np.ndarray) and v.ndim == 1]
        if not arrays:
            raise
    rows = [_counts(op, {**p, **{k: p[k][i].item() for k in arrays}}) for i in range(m)]
    return {k: np.array([r[k] for r in rows], dtype=np.float64) for k in rows[0]}


def _constant(values: np.ndarray) -> bool:
    """Whether every row holds the same value (then it is no group key)."""
    return len(values) <= 1 or bool((values[1:] == values[0]).all())


def batch_counts(op_name: str, shapes: Any) -> Any:
    """:func:`count_columns` of a DataFrame, as a DataFrame with the same index."""
    return to_frame(count_columns(op_name, shapes), index=shapes.index)
