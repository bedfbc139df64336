"""Distinct rows of a table, fast: predictions are made once per distinct shape (or distinct
feature vector) and broadcast back."""

from __future__ import annotations

import numpy as np
import pandas as pd


def distinct_rows(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(position of each distinct row's first occurrence, each row's distinct-row code):
    ``table.iloc[first].iloc[codes]`` equals ``table``. Columns are factorised one by one and
    combined into one integer key, ≈ 10× faster than factorising a MultiIndex."""
    n = len(table)
    if n <= 1:  # one row (a single estimate asks this often): nothing to factorise
        return np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    key, radix = np.zeros(n, dtype=np.int64), 1
    for col in table.columns:
        col_codes, uniques = pd.factorize(table[col], use_na_sentinel=False)
        if radix * len(uniques) >= 2**62:  # too many combinations for one int64: recode so far
            key = pd.factorize(key)[0].astype(np.int64)
            radix = int(key.max()) + 1
        key += col_codes.astype(np.int64) * radix
        radix *= max(1, len(uniques))
    codes = pd.factorize(key)[0]
    first = np.empty(int(codes.max()) + 1 if n else 0, dtype=np.int64)
    first[codes[::-1]] = np.arange(n)[::-1]  # the last write per code is its first position
    return first, codes
