"""Tables as named numpy columns: the prediction path's table type.

An estimate evaluates a few dozen ops on a handful of shapes each, so building pandas frames
(and importing pandas, ≈ 0.3–0.5 s of a 2-core machine) would cost more than the work itself.
The estimator, the op-count batches and the compiled models therefore pass ``Columns``: a
plain ``dict`` of equal-length 1-D numpy arrays, numbers as int/float arrays and anything else
(dtype names, roles) as object arrays. Every function here also takes a pandas DataFrame, so
callers that hold one (fitting, the analyzer) keep working without converting by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Columns = dict[str, np.ndarray]

# Above this many rows a hash table (pandas' factorize) beats numpy's sort-based unique; large
# batches come from sweeps and analyses that have pandas loaded anyway.
HASH_FACTORIZE_ROWS = 20_000


def _column(values: Any, n: int | None = None) -> np.ndarray:
    """One column as a 1-D array: strings become object arrays; a scalar is repeated ``n``
    times."""
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = np.full(1 if n is None else n, arr.item(),
                      dtype=object if arr.dtype.kind in "USO" else arr.dtype)
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    return arr


def _from_rows(rows: Sequence[Mapping[str, Any]]) -> Columns:
    """Columns of a list of row mappings; a key some rows lack is NaN there (as pandas does)."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    return {k: _column([r.get(k, np.nan) for r in rows]) for k in names}


def as_columns(table: Any) -> Columns:
    """``table`` as Columns: a DataFrame, a mapping of arrays or scalars (scalars repeat to
    the length of the longest column), or a sequence of row mappings."""
    if isinstance(table, dict) and all(isinstance(v, np.ndarray) and v.ndim == 1
                                       and v.dtype.kind not in "US" for v in table.values()):
        return table
    if hasattr(table, "columns") and hasattr(table, "iloc"):  # a pandas DataFrame
        return {str(c): _column(table[c].to_numpy()) for c in table.columns}
    if isinstance(table, Mapping):
        lengths = [np.size(v) for v in table.values() if np.ndim(v) > 0]
        n = max(lengths, default=1)
        return {str(k): _column(v, n) for k, v in table.items()}
    return _from_rows(list(table))


def n_rows(cols: Columns) -> int:
    return len(next(iter(cols.values()))) if cols else 0


def take(cols: Columns, idx: np.ndarray) -> Columns:
    """The rows at positions ``idx``, in that order."""
    return {k: v[idx] for k, v in cols.items()}


def to_frame(cols: Columns, index: Any = None) -> Any:
    """A pandas DataFrame of the columns (imports pandas: for fitting and reports only)."""
    import pandas as pd

    return pd.DataFrame(cols, index=index)


def is_numeric(arr: np.ndarray) -> bool:
    """Numbers (ints, floats, bools), as pandas' ``is_numeric_dtype`` says."""
    return arr.dtype.kind in "biuf"


def factorize(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(each value's code, numbered in order of first appearance; the number of distinct
    values). NaN is one value of its own."""
    n = len(values)
    if n > HASH_FACTORIZE_ROWS:
        import pandas as pd

        codes, uniques = pd.factorize(values, use_na_sentinel=False)
        return codes.astype(np.int64), len(uniques)
    if values.dtype.kind == "O":  # mixed Python objects may not sort: a dict keeps them apart
        seen: dict[Any, int] = {}
        codes = np.fromiter((seen.setdefault(_hashable(v), len(seen)) for v in values),
                            dtype=np.int64, count=n)
        return codes, len(seen)
    _, first, codes = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)  # codes in order of first appearance, as
    rank[np.argsort(first)] = np.arange(len(first))  # pandas gives them
    return rank[codes.reshape(-1)], len(first)


def _hashable(v: Any) -> Any:
    """NaN keys of a dict never match each other: map every float NaN to one key."""
    return "__nan__" if isinstance(v, float) and v != v else v


def distinct_rows(table: Any) -> tuple[np.ndarray, np.ndarray]:
    """(position of each distinct row's first occurrence, each row's distinct-row code):
    row ``first[codes[i]]`` equals row ``i``. Columns are factorised one by one and combined
    into one integer key, ≈ 10× faster than factorising tuples of the rows."""
    if isinstance(table, np.ndarray):  # a 2-D matrix: its columns
        cols, n = {str(j): table[:, j] for j in range(table.shape[1])}, len(table)
    else:
        cols = as_columns(table)
        n = n_rows(cols)
    if n <= 1:  # one row (a single estimate asks this often): nothing to factorise
        return np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    key, radix = np.zeros(n, dtype=np.int64), 1
    for col in cols.values():
        col_codes, count = factorize(col)
        if radix * count >= 2**62:  # too many combinations for one int64: recode so far
            key, radix = factorize(key)
        key += col_codes * radix
        radix *= max(1, count)
    codes, count = factorize(key)
    first = np.empty(count, dtype=np.int64)
    first[codes[::-1]] = np.arange(n)[::-1]  # the last write per code is its first position
    return first, codes

