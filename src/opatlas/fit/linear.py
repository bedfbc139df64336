"""The reshard seed's models: one ``duration = coef·size + intercept`` per group, with the
seed's in-sample metrics and, beyond the seed, the same metrics on held-out sizes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import LinearRegression

from opatlas.fit.metrics import rmsre, rrmse

RESHARD_GROUPS = ("in_grid", "out_grid", "group")
METRIC_COLUMNS = ("coef", "intercept", "r^2", "RRMSE", "RMSRE", "num_points")
RESHARD_HEADER = (*RESHARD_GROUPS, *METRIC_COLUMNS)
HELDOUT_COLUMNS = ("heldout_r^2", "heldout_RRMSE", "heldout_RMSRE", "heldout_points")


def fit_line(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    model = LinearRegression().fit(x.reshape(-1, 1), y)
    yhat = model.predict(x.reshape(-1, 1))
    r2 = float(model.score(x.reshape(-1, 1), y)) if len(y) > 1 else float("nan")
    return {"coef": float(model.coef_[0]), "intercept": float(model.intercept_), "r^2": r2,
            "RRMSE": rrmse(y, yhat), "RMSRE": rmsre(y, yhat), "num_points": len(y)}


def _groups(df: pd.DataFrame, group_cols: Sequence[str], x: str, y: str, average_by_x: bool):
    """(group key as a dict, the group's points) per group; points are y averaged per distinct x
    (as the seed does per tile count) unless ``average_by_x`` is False."""
    for key, g in df.groupby(list(group_cols), sort=True):
        pts = g.groupby(x, as_index=False)[y].mean() if average_by_x else g[[x, y]]
        key = key if isinstance(key, tuple) else (key,)
        yield dict(zip(group_cols, key, strict=True)), pts


def fit_linear_groups(df: pd.DataFrame, group_cols: Sequence[str], x: str, y: str,
                      average_by_x: bool = True) -> pd.DataFrame:
    """Per group, fit y on x; in-sample r², RRMSE, RMSRE and the number of points fitted."""
    return pd.DataFrame([{**key, **fit_line(pts[x].to_numpy(float), pts[y].to_numpy(float))}
                         for key, pts in _groups(df, group_cols, x, y, average_by_x)])


def heldout_linear_groups(df: pd.DataFrame, group_cols: Sequence[str], x: str, y: str,
                          split: str = "random", average_by_x: bool = True) -> pd.DataFrame:
    """Per group, the same metrics on held-out points: the group's points (distinct sizes) are
    split by ``split`` (see :mod:`opatlas.fit.splits`), so no test size is seen in training.
    Groups with fewer than 3 points, or splits leaving fewer than 2 to fit, get NaN."""
    from sklearn.metrics import r2_score

    from opatlas.fit.splits import iter_splits

    rows = []
    for key, pts in _groups(df, group_cols, x, y, average_by_x):
        xs, ys = pts[x].to_numpy(float), pts[y].to_numpy(float)
        truth, pred = [], []
        for train, test in (iter_splits(pts, split) if len(pts) >= 3 else ()):
            if len(train) >= 2 and len(test):
                line = LinearRegression().fit(xs[train].reshape(-1, 1), ys[train])
                truth.append(ys[test])
                pred.append(line.predict(xs[test].reshape(-1, 1)))
        rec = dict.fromkeys(HELDOUT_COLUMNS, float("nan")) | {"heldout_points": 0}
        if truth:
            t, p = np.concatenate(truth), np.concatenate(pred)
            rec = {"heldout_r^2": float(r2_score(t, p)) if len(t) > 1 else float("nan"),
                   "heldout_RRMSE": rrmse(t, p), "heldout_RMSRE": rmsre(t, p),
                   "heldout_points": len(t)}
        rows.append({**key, **rec})
    return pd.DataFrame(rows)


def predict_linear(models: pd.DataFrame, df: pd.DataFrame, group_cols: Sequence[str],
                   x: str) -> np.ndarray:
    m = df[list(group_cols)].merge(models, on=list(group_cols), how="left")
    return (m["coef"] * df[x].to_numpy() + m["intercept"]).to_numpy()


def write_models_csv(models: pd.DataFrame, path: str | Path, shards: int = 1,
                     group_cols: Sequence[str] = RESHARD_GROUPS) -> list[Path]:
    """CSV with the group columns then the metrics: for reshard groups exactly the seed's header
    ``in_grid,out_grid,group,coef,intercept,r^2,RRMSE,RMSRE,num_points``. One file (``path``),
    or ``shards`` files ``path.0 .. path.N-1`` splitting the rows in order as the seed's
    models.csv.0..11 do: file ``i`` holds rows ``i·N//shards`` up to ``(i+1)·N//shards``."""
    from opatlas.atomic import write_output

    path = Path(path)
    table = models[[*group_cols, *METRIC_COLUMNS]]
    if shards <= 1:
        return [write_output(path, lambda tmp: table.to_csv(tmp, index=False))]
    out = []
    n = len(table)
    for i in range(shards):
        rows = table.iloc[i * n // shards:(i + 1) * n // shards]
        out.append(write_output(path.with_name(f"{path.name}.{i}"),
                                lambda tmp, rows=rows: rows.to_csv(tmp, index=False)))
    return out
