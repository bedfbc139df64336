"""Summary statistics of repeat timings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def summarize(samples_ns: Sequence[int | float]) -> dict[str, float]:
    """mean/std (population)/median/min/max in ns of the repeats."""
    a = np.asarray(samples_ns, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no samples to summarise")
    return {"mean_ns": float(a.mean()), "std_ns": float(a.std()),
            "median_ns": float(np.median(a)), "min_ns": float(a.min()), "max_ns": float(a.max())}
