"""Held-out predictions for a results store's rows: each (op, pass) group's rows predicted by
the fit recipe's models of the folds that do not hold them (k-fold cross-validation).

A store of 10^5 rows is tens of groups and hundreds of LightGBM fits, minutes of CPU: the groups
run in worker processes (:mod:`opatlas.pool`: one per core, each fit on one thread, the biggest
groups first), and a progress line reports rows done."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from opatlas.fit.recipes import MIN_FIT_ROWS
from opatlas.pool import each, workers_for

FOLDS = 5
# fewer measured shapes than this: no held-out prediction (each fold's model must be fitted
# on MIN_FIT_ROWS rows, as everywhere: 4/5 of 13 is 10)
MIN_ROWS = -(-MIN_FIT_ROWS * FOLDS // (FOLDS - 1))
# below this many rows in all, worker processes cost more (start, imports) than they save
POOL_MIN_ROWS = 4000


@dataclass
class Job:
    """One (op, pass) group of one device and dtype: its shapes and measured seconds."""

    key: Any  # the caller's handle (e.g. the rows' index)
    op: str
    pass_: str
    device: Any
    dtype: str
    shapes: pd.DataFrame
    seconds: np.ndarray

    def __len__(self) -> int:
        return len(self.shapes)


def predict_all(jobs: list[Job], progress: Any = None, workers: int | None = None,
                pool_min_rows: int = POOL_MIN_ROWS
                ) -> Iterator[tuple[Job, np.ndarray, list[str]]]:
    """(job, held-out seconds per row (NaN: none), notes) for every job, in any order;
    ``progress.advance("ok", rows, detail)`` after each. ``workers``: processes (default one
    per usable core; 1 runs in this process), used from ``pool_min_rows`` rows in all."""
    jobs = sorted(jobs, key=len, reverse=True)  # the longest first: the pool ends together
    n = workers_for(len(jobs), workers) if sum(map(len, jobs)) >= pool_min_rows else 1
    # pooled, one LightGBM thread per process: processes × threads never exceed the cores
    for i, (pred, notes) in each(partial(held_out, threads=1 if n > 1 else None), jobs, n):
        job = jobs[i]
        if progress is not None:
            progress.advance("ok", len(job), detail=f"{job.op} {job.pass_}")
        yield job, pred, notes


def held_out(job: Job, threads: int | None = None) -> tuple[np.ndarray, list[str]]:
    """Each row of ``job`` predicted (seconds) by the model of the folds that do not hold it,
    and what could not be predicted and why. ``threads``: LightGBM's (None: its default)."""
    from opatlas.fit.recipes import make_model
    from opatlas.fit.splits import iter_splits

    shapes, where = job.shapes.reset_index(drop=True), f"{job.op} {job.pass_}"
    out = np.full(len(shapes), np.nan)
    if len(shapes) < MIN_ROWS:
        return out, [f"{where}: {len(shapes)} measured shapes, fewer than {MIN_ROWS}: "
                     f"no held-out prediction"]
    if shapes.select_dtypes("number").shape[1] == 0:  # e.g. reshard: grids and strategies
        return out, [f"{where}: its shapes have no numeric parameter a model can learn from: "
                     f"no held-out prediction (reshards: opatlas fit --recipe reshard)"]
    y_us = np.asarray(job.seconds, dtype=float) * 1e6
    try:
        for train, test in iter_splits(shapes, f"kfold:{FOLDS}"):
            m = make_model("hybrid", job.op, job.pass_, job.device, job.dtype, threads=threads)
            out[test] = m.fit(shapes.iloc[train], y_us[train]).predict(shapes.iloc[test]) * 1e-6
    except Exception as exc:  # a model that cannot fit these shapes: say so, keep the rows
        return np.full(len(shapes), np.nan), [f"{where}: no prediction "
                                              f"({type(exc).__name__}: {exc})"]
    return out, []
