"""Held-out evaluation of op models, side by side with the estimate-train-time baseline."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from opatlas.devices import Device
from opatlas.fit.data import device_for, shapes_of
from opatlas.fit.metrics import all_metrics
from opatlas.fit.recipes import make_model
from opatlas.fit.splits import iter_splits


@dataclass
class Evaluation:
    op: str
    pass_: str
    recipe: str
    split: str
    n_train: int
    n_test: int
    mape: float
    rmsre: float
    r2: float
    max_error: float
    baseline_mape: float | None = None
    baseline_rmsre: float | None = None

    def as_json(self) -> dict:
        d = asdict(self)
        d["pass"] = d.pop("pass_")
        return d


def _cv(recipe: str, op: str, pass_: str, device: Device, dtype: str, shapes: pd.DataFrame,
        y: np.ndarray, split: str) -> tuple[dict, int, int, str]:
    dev = device
    truth, pred, n_train, used = [], [], 0, recipe
    for train, test in iter_splits(shapes, split):
        m = make_model(recipe, op, pass_, dev, dtype).fit(shapes.iloc[train], y[train])
        used = m.recipe
        truth.append(y[test])
        pred.append(m.predict(shapes.iloc[test]))
        n_train = len(train)
    t, p = np.concatenate(truth), np.concatenate(pred)
    return all_metrics(t, p), n_train, len(t), used


def evaluate_group(df: pd.DataFrame, recipe: str, split: str, baseline: bool = True
                   ) -> Evaluation:
    """``df``: rows of one (op, pass, device, dtype) from :func:`load_op_data`."""
    op, pass_, device, dtype = (df[c].iloc[0] for c in ("op", "pass", "device", "dtype"))
    shapes, y = shapes_of(df), df["y_us"].to_numpy(float)
    device = device_for(device, df, dtype)
    metrics, n_train, n_test, used = _cv(recipe, op, pass_, device, dtype, shapes, y, split)
    ev = Evaluation(op, pass_, used, split, n_train, n_test, **metrics)
    if baseline and recipe != "ett":
        base, *_ = _cv("ett", op, pass_, device, dtype, shapes, y, split)
        ev.baseline_mape, ev.baseline_rmsre = base["mape"], base["rmsre"]
    return ev


def evaluate_all(data: pd.DataFrame, recipe: str = "hybrid", split: str = "random",
                 ops: list[str] | None = None, baseline: bool = True) -> list[Evaluation]:
    out = []
    for _, g in data.groupby(["op", "pass", "device", "dtype"], sort=True):
        if ops and g["op"].iloc[0] not in ops:
            continue
        if len(g) < 10:
            continue
        if split.startswith("extrapolate:"):
            col = split.split(":")[1]
            if col not in shapes_of(g.head(1)):
                continue  # this op has no such parameter
        out.append(evaluate_group(g.reset_index(drop=True), recipe, split, baseline))
    return out
