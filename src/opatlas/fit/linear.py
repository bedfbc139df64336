"""The reshard seed's models: one ``duration = coef·size + intercept`` per group."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import LinearRegression

from opatlas.fit.metrics import rmsre, rrmse

RESHARD_HEADER = ("in_grid", "out_grid", "group", "coef", "intercept", "r^2", "RRMSE", "RMSRE",
                  "num_points")


def fit_line(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    model = LinearRegression().fit(x.reshape(-1, 1), y)
    yhat = model.predict(x.reshape(-1, 1))
    r2 = float(model.score(x.reshape(-1, 1), y)) if len(y) > 1 else float("nan")
    return {"coef": float(model.coef_[0]), "intercept": float(model.intercept_), "r^2": r2,
            "RRMSE": rrmse(y, yhat), "RMSRE": rmsre(y, yhat), "num_points": len(y)}


def fit_linear_groups(df: pd.DataFrame, group_cols: Sequence[str], x: str, y: str,
                      average_by_x: bool = True) -> pd.DataFrame:
    """Per group, fit y on x (first averaging y per distinct x, as the seed does per tile count);
    in-sample r², RRMSE, RMSRE and the number of points fitted."""
    rows = []
    for key, g in df.groupby(list(group_cols), sort=True):
        pts = g.groupby(x, as_index=False)[y].mean() if average_by_x else g[[x, y]]
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(group_cols, key, strict=True)),
                     **fit_line(pts[x].to_numpy(float), pts[y].to_numpy(float))})
    return pd.DataFrame(rows)


def predict_linear(models: pd.DataFrame, df: pd.DataFrame, group_cols: Sequence[str],
                   x: str) -> np.ndarray:
    m = df[list(group_cols)].merge(models, on=list(group_cols), how="left")
    return (m["coef"] * df[x].to_numpy() + m["intercept"]).to_numpy()


def write_models_csv(models: pd.DataFrame, path: str | Path, shards: int = 1) -> list[Path]:
    """CSV with exactly the reshard header (``path``), or ``shards`` files ``path.0 .. path.N-1``
    splitting the rows in order, as the seed's models.csv.0..11."""
    path = Path(path)
    table = models[list(RESHARD_HEADER)]
    if shards <= 1:
        table.to_csv(path, index=False)
        return [path]
    out = []
    for i, part in enumerate(np.array_split(np.arange(len(table)), shards)):
        p = path.with_name(f"{path.name}.{i}")
        table.iloc[part].to_csv(p, index=False)
        out.append(p)
    return out
