"""Train/test splits: ``random[:FRAC]`` (one shuffled split, default 20% test),
``kfold:K``, ``extrapolate:COL:FRAC`` (test on the top FRAC of COL's distinct values — no test
value is ever seen in training), ``group:COL`` (leave one group out).

A split is a function of the rows' values, never of their order: the seeded permutation is
applied to the rows in :func:`canonical_order`, so the same rows read in another order (a
shuffled CSV, an export's round trip) are tested in the same folds."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from opatlas.errors import OpatlasError

SEED = 42
FORMS = "random[:FRAC], kfold:K, extrapolate:COL:FRAC or group:COL"


def check_split(spec: str) -> None:
    """Refuse a malformed split before any data is read (what depends on the data, such as a
    column's presence or K against the row count, is checked by :func:`iter_splits`)."""
    kind, _, rest = spec.partition(":")
    if kind == "random":
        _fraction(spec, rest)
    elif kind == "kfold":
        _folds(spec, rest, None)
    elif kind == "extrapolate":
        col, _, frac = rest.partition(":")
        if not col:
            raise OpatlasError(f"split {spec!r}: name the column, e.g. extrapolate:dim:0.2")
        _fraction(spec, frac)
    elif kind == "group":
        if not [c for c in rest.split(",") if c]:
            raise OpatlasError(f"split {spec!r}: no column named; e.g. group:dim")
    else:
        raise OpatlasError(f"unknown split {spec!r}: use {FORMS}")


def split_label(spec: str) -> str:
    """``spec`` with the K or test fraction it leaves to its default said (``kfold`` is
    ``kfold:5``, ``extrapolate:dim`` is ``extrapolate:dim:0.2``), for titles and JSON; a
    plain ``random`` stays as the documented default. ``spec`` is checked already."""
    kind, _, rest = spec.partition(":")
    if kind == "kfold":
        return f"kfold:{_folds(spec, rest, None)}"
    if kind == "extrapolate" and ":" not in rest:
        return f"{spec}:{_fraction(spec, '')}"
    return spec


def canonical_order(df: pd.DataFrame, *extra: np.ndarray) -> np.ndarray:
    """Positions of ``df``'s rows sorted by their values: its columns by name, then each of
    ``extra`` (one value per row, e.g. the measured times). Numbers sort as numbers (4 and
    4.0 are one value, as a CSV's round trip may turn one into the other), other values by
    their text; rows tied on every key are equal in all of them, so their order is moot."""
    keys: list[np.ndarray] = []
    for col in sorted(df.columns, key=str):
        keys += _sort_keys(df[col])
    keys += [np.asarray(e) for e in extra]
    if not keys:
        return np.arange(len(df))
    return np.lexsort(keys[::-1])  # lexsort's primary key is its last


def in_canonical_order(shapes: pd.DataFrame, y: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows sorted by shape, then time: the folds and each model's training order (its
    validation share, its trees' sampling) then depend on the data's rows, not their order."""
    order = canonical_order(shapes, y)
    return shapes.iloc[order].reset_index(drop=True), y[order]


def _sort_keys(col: pd.Series) -> list[np.ndarray]:
    """A column as two sort keys: its numeric values (NaN where not a number), then the text
    of the values that are not numbers (empty where they are)."""
    try:
        num = pd.to_numeric(col, errors="coerce").to_numpy(float)
    except (TypeError, ValueError):  # lists, dicts: not numbers
        num = np.full(len(col), np.nan)
    text = np.where(np.isnan(num), col.astype(str).to_numpy(str), "")
    return [num, text]


def iter_splits(df: pd.DataFrame, spec: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (train positions, test positions), by the rows' values (:func:`canonical_order`)
    and not their order in ``df``."""
    kind, _, rest = spec.partition(":")
    n = len(df)
    rng = np.random.default_rng(SEED)
    if kind == "random":
        frac = _fraction(spec, rest)
        perm = canonical_order(df)[rng.permutation(n)]
        k = max(1, round(n * frac))
        yield np.sort(perm[k:]), np.sort(perm[:k])
    elif kind == "kfold":
        k = _folds(spec, rest, n)
        folds = np.array_split(canonical_order(df)[rng.permutation(n)], k)
        for i in range(k):
            test = folds[i]
            yield np.sort(np.concatenate([f for j, f in enumerate(folds) if j != i])), np.sort(test)
    elif kind == "extrapolate":
        col, _, frac_s = rest.partition(":")
        if col not in df:
            raise OpatlasError(f"split {spec!r}: no column {col!r} (have {sorted(df.columns)})")
        num = _numeric_column(spec, df[col], col)
        values = np.sort(num.dropna().unique())
        frac = _fraction(spec, frac_s)
        k = max(1, round(len(values) * frac))
        if k >= len(values):
            raise OpatlasError(f"split {spec!r}: {col} has too few distinct values")
        cut = values[-k]
        mask = (num >= cut).to_numpy()
        yield np.flatnonzero(~mask), np.flatnonzero(mask)
    elif kind == "group":
        cols = [c for c in rest.split(",") if c]
        missing = [c for c in cols if c not in df]
        if not cols or missing:
            what = f"no column {', '.join(map(repr, missing))}" if missing else "no column named"
            raise OpatlasError(f"split {spec!r}: {what}; group by columns the data has "
                               f"({', '.join(sorted(map(str, df.columns)))})")
        keys = df[cols].astype(str).agg("|".join, axis=1).to_numpy()
        for g in np.unique(keys):
            yield np.flatnonzero(keys != g), np.flatnonzero(keys == g)
    else:
        raise OpatlasError(f"unknown split {spec!r}: use {FORMS}")


def _numeric_column(spec: str, col: pd.Series, name: str) -> pd.Series:
    """``col`` as numbers, or an error: extrapolation tests on a column's largest values,
    which text (a role, a stage) has none of; its alphabetical order would be no more than
    an arbitrary group held out, its errors no extrapolation's."""
    num = pd.to_numeric(col, errors="coerce") if not pd.api.types.is_bool_dtype(col) else \
        pd.Series(np.nan, index=col.index)
    bad = num.isna() & col.notna()
    if bad.any():
        raise OpatlasError(f"split {spec!r}: column {name!r} is not numeric (it holds "
                           f"{col[bad].iloc[0]!r}), so it has no largest values to "
                           f"extrapolate to; use group:{name} to leave each value out")
    return num


def _fraction(spec: str, text: str) -> float:
    """A test fraction in (0, 1), 0.2 when not given."""
    frac = _number(spec, text, 0.2)
    if not 0 < frac < 1:
        raise OpatlasError(f"split {spec!r}: the test fraction must be in (0, 1)")
    return frac


def _folds(spec: str, text: str, n: int | None) -> int:
    """K, a whole number >= 2 (5 when not given), and at most the row count ``n`` if known."""
    k = _number(spec, text, 5)
    if n is None and (k != int(k) or k < 2):
        raise OpatlasError(f"split {spec!r}: K must be a whole number >= 2")
    if n is not None and (k != int(k) or not 2 <= k <= max(n, 2)):
        raise OpatlasError(f"split {spec!r}: K must be a whole number from 2 to the row "
                           f"count ({n})")
    return int(k)


def _number(spec: str, text: str, default: float) -> float:
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise OpatlasError(f"split {spec!r}: {text!r} is not a number") from None
    if not np.isfinite(value):
        raise OpatlasError(f"split {spec!r}: {text!r} is not a finite number")
    return value
