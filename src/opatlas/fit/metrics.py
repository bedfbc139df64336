"""Error metrics. RRMSE = RMSE / mean(y) and RMSRE = sqrt(mean(((y − ŷ)/y)²)) as the reshard
seed defines them; r² is scikit-learn's score."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import r2_score


def mape(y: np.ndarray, yhat: np.ndarray) -> float:
    return float(np.mean(np.abs((y - yhat) / y)))


def rmsre(y: np.ndarray, yhat: np.ndarray) -> float:
    return float(np.sqrt(np.mean(((y - yhat) / y) ** 2)))


def rrmse(y: np.ndarray, yhat: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - yhat) ** 2)) / np.mean(y))


def max_error(y: np.ndarray, yhat: np.ndarray) -> float:
    """Largest relative error."""
    return float(np.max(np.abs((y - yhat) / y)))


def r2(y: np.ndarray, yhat: np.ndarray) -> float:
    return float(r2_score(y, yhat)) if len(y) > 1 else float("nan")


def all_metrics(y: np.ndarray, yhat: np.ndarray) -> dict[str, float]:
    y, yhat = np.asarray(y, dtype=float), np.asarray(yhat, dtype=float)
    return {"mape": mape(y, yhat), "rmsre": rmsre(y, yhat), "r2": r2(y, yhat),
            "max_error": max_error(y, yhat)}
