"""Checks of result rows read from a file (``opatlas import results``) before any is written.

A store trusts its rows: fitting takes logs of medians, the table divides by means, resume
matches ids. So an exported file is checked whole at the boundary, and the first bad row is
named (file, row, column, value); nothing of a bad file is imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from opatlas.errors import StoreError

KEY_TEXT = ("vector_id", "op", "pass", "backend", "device", "dtype")
TIMES = ("mean_ns", "std_ns", "median_ns", "min_ns", "max_ns")
OK_NEEDS = ("mean_ns", "median_ns")  # every writer sets them for a measured ok row


@dataclass
class _Bad:
    """Rows failing one check: a mask, the column to quote, and why (after the value)."""

    mask: np.ndarray
    column: str
    why: str


def check_results(df: pd.DataFrame, path: Path, statuses: tuple[str, ...]) -> pd.DataFrame:
    """``df`` (read from ``path``) with ``created_at`` parsed, or a ``StoreError`` naming the
    first bad row and how many are bad."""
    created = pd.to_datetime(df["created_at"], errors="coerce", format="ISO8601", utc=True)
    checks = [*_text_checks(df), *_number_checks(df, statuses),
              _Bad(~df["status"].isin(statuses).to_numpy(), "status",
                   f"is not a status (one of {', '.join(statuses)})"),
              _Bad(~df["params_json"].map(_is_json_object).to_numpy(bool), "params_json",
                   "is not a JSON object of parameters"),
              _Bad(created.isna().to_numpy(), "created_at", "is not a date and time")]
    bad = [c for c in checks if c.mask.any()]
    if bad:
        raise StoreError(_describe(df, path, bad))
    out = df.copy()
    out["created_at"] = created.dt.tz_localize(None)  # UTC, as the store keeps it
    return out


def _text_checks(df: pd.DataFrame) -> list[_Bad]:
    out = []
    for col in KEY_TEXT:
        s = df[col]
        empty = s.isna() | (s.astype(str).str.strip() == "")
        out.append(_Bad(empty.to_numpy(bool), col, "is empty"))
    return out


def _number_checks(df: pd.DataFrame, statuses: tuple[str, ...]) -> list[_Bad]:
    out = []
    reps = pd.to_numeric(df["repeats"], errors="coerce")
    out.append(_Bad((reps.isna() | (reps < 0) | (reps % 1 != 0)).to_numpy(bool), "repeats",
                    "is not a count (a whole number >= 0)"))
    times = {c: pd.to_numeric(df[c], errors="coerce").astype(float) for c in TIMES}
    for col, x in times.items():
        given = df[col].notna().to_numpy(bool)
        with np.errstate(invalid="ignore"):
            bad = given & ~(np.isfinite(x.to_numpy()) & (x.to_numpy() >= 0))
        out.append(_Bad(bad, col, "is not a time (a finite number of ns >= 0)"))
    # an ok row with samples (repeats, or any time) needs its median and mean; one with
    # none is what a store records when a backend returned no samples for a pass
    timed = (reps > 0).to_numpy(bool) | df[list(TIMES)].notna().any(axis=1).to_numpy(bool)
    measured = (df["status"] == "ok").to_numpy(bool) & timed
    for col in OK_NEEDS:
        out.append(_Bad(measured & df[col].isna().to_numpy(bool), col,
                        "is missing, and an ok row with samples needs it"))
    lo, mid, hi = times["min_ns"], times["median_ns"], times["max_ns"]
    out.append(_Bad(((lo > mid) | (mid > hi)).to_numpy(bool), "median_ns",
                    "is not between min_ns and max_ns"))
    return out


def _is_json_object(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _describe(df: pd.DataFrame, path: Path, bad: list[_Bad]) -> str:
    """The first bad row (1-based, with its line in a CSV), its value, and the count."""
    first = min(bad, key=lambda c: int(np.argmax(c.mask)))
    row = int(np.argmax(first.mask))
    rows = np.logical_or.reduce([c.mask for c in bad])
    line = f" (line {row + 2})" if path.suffix.lower() == ".csv" else ""
    value = df[first.column].iloc[row]
    more = int(rows.sum()) - 1
    also = f"; {more} more row(s) are bad too" if more else ""
    return (f"{path}: row {row + 1}{line}: {first.column} {_shown(value)} {first.why}{also}. "
            f"Nothing was imported")


def _shown(value: object) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "(missing)"
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)
