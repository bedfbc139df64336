"""Model recipes for op runtimes, one model per (op, pass, device, dtype).

* ``ett``: estimate-train-time's baseline — its chosen RandomForest/XGBoost with the stored
  hyperparameters, on its own shape features, raw µs target.
* ``gbm``: LightGBM on log(µs) with the analytical features; clamps outside the sampled range
  like any tree model.
* ``hybrid`` (default): LightGBM on log(time / roofline time), times the roofline: the trees
  learn the efficiency, the roofline carries the scaling, so predictions beyond the sampled
  range grow with the op's FLOPs and bytes instead of clamping.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from opatlas.columns import Columns, as_columns, distinct_rows, n_rows, to_frame
from opatlas.devices import Device
from opatlas.errors import OpatlasError, UnknownOpError
from opatlas.fit.compiled import CompiledTrees, predict_raw
from opatlas.fit.features import ett_features, feature_columns, op_features

if TYPE_CHECKING:
    import pandas as pd

RECIPES = ("ett", "gbm", "hybrid")
# Part of every cached model's fingerprint: bump it when a recipe changes how it fits, so models
# cached by an earlier revision are refitted instead of trusted.
# 2: tree count by early stopping (was a fixed 1,000); 3: per-launch overhead in the base of
# ops that count their launches (the optimizer steps); 4: the hybrid's base changed with the
# op counts (the causal masked softmax's least traffic reads its triangle only); 5: a matmul's
# backward is two GEMM kernels, each reading the output's gradient (its least traffic counted it
# once)
RECIPE_REVISION = "5"
# L1 objective: upstream's samples have heavy-tailed noise (leaky trimmed means), and the
# median of log-time is what MAPE rewards.
GBM_PARAMS = {"learning_rate": 0.04, "num_leaves": 31,
              "min_child_samples": 3, "objective": "l1", "subsample": 0.8, "subsample_freq": 1,
              "colsample_bytree": 0.8, "random_state": 42, "n_jobs": 2, "verbose": -1}
# Threads: two for the bundled datasets (10^3-10^4 rows), one below SMALL_FIT_ROWS. A small
# fit is all barriers and little work, and on a busy machine each barrier of LightGBM's OpenMP
# threads waits a scheduler slice for the descheduled one: the demo's fits on a few dozen
# rows went from 12 s to 60-110 s of wall time beside two CPU hogs. One thread gives the same
# trees (LightGBM's results do not depend on the thread count here; tested).
SMALL_FIT_ROWS = 1000
# The fewest rows a model is fitted on: ``predict`` refuses to fit on fewer, and ``fit`` skips
# an (op, pass) whose split leaves a fold fewer (a tree model on a handful of rows is a guess,
# and LightGBM refuses one row outright).
MIN_FIT_ROWS = 10


_fit_threads: int = GBM_PARAMS["n_jobs"]  # what `opatlas fit --threads` sets for its process


@contextmanager
def fit_threads_as(threads: int | None) -> Iterator[None]:
    """Within: the threads of every fit on ``SMALL_FIT_ROWS`` rows or more (None: the default,
    two), more on a machine with more cores; the trees do not depend on it."""
    global _fit_threads
    before = _fit_threads
    _fit_threads = before if threads is None else int(threads)
    try:
        yield
    finally:
        _fit_threads = before


def fit_threads() -> int:
    return _fit_threads


def gbm_params(rows: int, threads: int | None = None) -> dict:
    """``GBM_PARAMS`` with the thread count for a fit on ``rows`` rows (``threads``: the
    caller's, e.g. one per worker process of a pool)."""
    if threads is None:
        threads = 1 if rows < SMALL_FIT_ROWS else _fit_threads
    return {**GBM_PARAMS, "n_jobs": threads}


# The number of trees is chosen per model: early stopping on a seeded validation share of the
# training rows, then a refit on all of them with proportionally more trees. Noisy ops (flash
# attention, softmax) stop at ~200 trees instead of fitting noise with 1,000; smooth ones
# (bmm) go past 1,000. Fewer trees also means faster predictions.
MAX_TREES, PATIENCE, VALIDATION_SHARE, REFIT_SCALE, MIN_TREES = 3000, 100, 0.2, 1.2, 50
SMALL_DATA_TREES = 300  # below MIN_ROWS_FOR_STOPPING rows there is too little to validate on
MIN_ROWS_FOR_STOPPING = 50


@cache
def ett_configs() -> pd.DataFrame:
    import pandas as pd

    from opatlas.store.ett import bundled_dataset

    return pd.read_csv(bundled_dataset() / "operator" / "NVIDIAA100-SXM4-80GB.csv")


def ett_estimator(op: str, pass_: str) -> Any:
    """Upstream's chosen estimator and hyperparameters for (op, pass); RF(100) if none."""
    from sklearn.ensemble import RandomForestRegressor

    cfg = ett_configs()
    prop = "dur" if pass_ == "step" else pass_
    row = cfg[(cfg["Function"] == op) & (cfg["Propagation"] == prop)]
    if row.empty:
        return RandomForestRegressor(n_estimators=100, random_state=42, n_jobs=_fit_threads)
    params = ast.literal_eval(row["Best_config"].iloc[0])
    if row["Best_model"].iloc[0] == "xgboost":
        from xgboost import XGBRegressor

        return XGBRegressor(**params, random_state=42, n_jobs=_fit_threads)
    return RandomForestRegressor(**params, random_state=42, n_jobs=_fit_threads)


class NoCountsWarning(UserWarning):
    """The hybrid recipe was asked for an op whose counts fail: its model is gbm."""


@dataclass
class OpModel:
    """A fitted model of one (op, pass) on one device and dtype."""

    recipe: str
    op: str
    pass_: str
    device: Device
    dtype: str
    features: list[str] = field(default_factory=list)
    model: Any = None
    # hybrid, for ops whose counts include ``tensors`` (kernels launched): time ≈ c0 +
    # c1·tensors + c2·roofline, fitted on the training rows; None: the roofline alone
    overhead: np.ndarray | None = None
    threads: int | None = None  # LightGBM's threads for the fit (None: by the rows)

    def _X(self, shapes: pd.DataFrame) -> pd.DataFrame:
        if self.recipe == "ett":
            return ett_features(self.op, shapes)
        return op_features(self.op, self.pass_, shapes, self.device, self.dtype)

    def _uses_roofline(self, X: pd.DataFrame) -> bool:
        return self.recipe == "hybrid" and bool(np.isfinite(X["roofline_us"]).all())

    def _count_error(self, shapes: pd.DataFrame) -> str | None:
        """Why the op's counts fail on ``shapes``, for the warning; None for an op outside
        the catalog (data of an op with no formulas, e.g. estimate-train-time's
        ``optimizer``: trees over its shape are all there is)."""
        from opatlas.ops.batch import count_columns

        try:
            c = count_columns(self.op, shapes, dtype=self.dtype)
        except UnknownOpError:
            return None
        except Exception as e:  # a user's formula may raise anything
            return f"{type(e).__name__}: {e}"
        return "no count for this pass" if f"flops_{self.pass_}" not in c else "NaN counts"

    def fit(self, shapes: pd.DataFrame, y_us: np.ndarray) -> OpModel:
        X = self._X(shapes)
        y = np.asarray(y_us, dtype=float)
        if self.recipe == "ett":
            self.model = ett_estimator(self.op, self.pass_)
            self.features = list(X.columns)
            self.model.fit(X.to_numpy(), y)
            return self
        import lightgbm as lgb

        roof = self._uses_roofline(X)
        why = self._count_error(shapes) if self.recipe == "hybrid" and not roof else None
        if why:
            warnings.warn(f"{self.op} {self.pass_}: its FLOPs and bytes could not be counted "
                          f"for every row ({why}), so its model is the gbm recipe's trees "
                          f"over the shape alone, not the hybrid's roofline base",
                          NoCountsWarning, stacklevel=2)
        self.recipe = "hybrid" if roof else ("gbm" if self.recipe == "hybrid" else self.recipe)
        if roof and LAUNCHES in X:
            self.overhead = fit_overhead(X[LAUNCHES].to_numpy(), X["roofline_us"].to_numpy(), y)
        target = np.log(y / self._base_us(X)) if roof else np.log(y)
        X = X.drop(columns=["roofline_us"]) if "roofline_us" in X else X
        if roof or self.recipe == "gbm":
            # with analytical counts, keep only effective shapes: rows that label the same
            # kernel work differently (mp, h, dim) pool instead of being fitted apart
            effective = [c for c in X.columns if c.startswith("f_") or c not in shapes.columns]
            if any(c.startswith("f_") for c in effective):
                X = X[effective]
        self.features = list(X.columns)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n_trees = _tree_count(X, target, self.threads)
            self.model = lgb.LGBMRegressor(**gbm_params(len(X), self.threads),
                                           n_estimators=n_trees).fit(X, target)
        self._compiled()  # compiled once here, so it is saved with the model
        return self

    def compiled_only(self) -> CompiledOpModel | None:
        """This model without LightGBM: its compiled trees and what predicting needs, to be
        cached beside it and loaded with numpy alone (None where the trees did not compile)."""
        trees = self._compiled() if self.recipe != "ett" else None
        if trees is None:
            return None
        return CompiledOpModel(self.recipe, self.op, self.pass_, self.device, self.dtype,
                               list(self.features), None, getattr(self, "overhead", None),
                               trees=trees)

    def _compiled(self) -> CompiledTrees | None:
        if not hasattr(self, "_trees"):  # built on first use; models unpickled lack it too
            self._trees = CompiledTrees.from_booster(self.model.booster_)
        return self._trees

    def predict(self, shapes: Any) -> np.ndarray:
        """Times in µs, one per row of ``shapes`` (Columns or a DataFrame)."""
        table = as_columns(shapes)
        if n_rows(table) == 0:
            return np.zeros(0)
        if self.recipe == "ett":
            X = ett_features(self.op, to_frame(table))
            return self.model.predict(X[self.features].to_numpy())
        cols = feature_columns(self.op, self.pass_, table, self.device, self.dtype)
        # shapes labelled differently often mean the same kernel work (same features): walk
        # the trees once per distinct feature vector
        first, codes = distinct_rows({f: cols[f] for f in self.features})
        F = np.column_stack([np.asarray(cols[f][first], dtype=np.float64)
                             for f in self.features])
        raw = self._raw(F)[codes]
        if self.recipe == "hybrid":
            return self._base_us(cols) * np.exp(raw)
        return np.exp(raw)

    def _raw(self, F: np.ndarray) -> np.ndarray:
        return predict_raw(self.model.booster_, self._compiled(), F)

    def _base_us(self, X: pd.DataFrame | Columns) -> np.ndarray:
        """What the hybrid trees correct: the roofline, or the overhead-aware line."""
        coef = getattr(self, "overhead", None)  # models pickled before revision 3 lack it
        roof = np.asarray(X["roofline_us"], dtype=float)
        if coef is None:
            return roof
        return coef[0] + coef[1] * np.asarray(X[LAUNCHES], dtype=float) + coef[2] * roof


@dataclass
class CompiledOpModel(OpModel):
    """An :class:`OpModel` reduced to its compiled trees: predicts with numpy (Numba for large
    batches), so loading it imports neither LightGBM nor scikit-learn."""

    trees: CompiledTrees | None = None

    def fit(self, shapes: pd.DataFrame, y_us: np.ndarray) -> OpModel:
        raise TypeError("a compiled model is fitted as an OpModel, then compiled")

    def _raw(self, F: np.ndarray) -> np.ndarray:
        return self.trees.predict_any(F)


LAUNCHES = "f_tensors"


def fit_overhead(launches: np.ndarray, roofline_us: np.ndarray, y_us: np.ndarray) -> np.ndarray:
    """(c0, c1, c2) of ``y ≈ c0 + c1·launches + c2·roofline`` by least relative squares, all
    ≥ 0 and c2 > 0 (the best of the non-negative solutions that keep the roofline term).

    An optimizer step walks its parameter tensors: each costs a fixed time (kernel launches,
    and the host work between them that a first-to-last-kernel span includes), the rest is
    memory-bound in the parameter count, so the roofline term (c2 = 1/efficiency) carries the
    scaling to sizes never sampled while the per-tensor term keeps small, many-tensor stages
    right."""
    A = np.column_stack([np.ones_like(y_us), launches, roofline_us]) / y_us[:, None]
    ones = np.ones_like(y_us)
    best, best_err = np.array([0.0, 0.0, 1.0]), np.inf
    for cols in ([0, 1, 2], [1, 2], [0, 2], [2]):
        coef = np.zeros(3)
        coef[cols] = np.linalg.lstsq(A[:, cols], ones, rcond=None)[0]
        err = float(np.sum((A @ coef - ones) ** 2))
        if (coef >= 0).all() and coef[2] > 0 and err < best_err:
            best, best_err = coef, err
    return best


def _tree_count(X: pd.DataFrame, target: np.ndarray, threads: int | None = None) -> int:
    """Trees for the final fit: early stopping (L1, ``PATIENCE`` rounds) on a seeded
    ``VALIDATION_SHARE`` of the rows, scaled by ``REFIT_SCALE`` for the refit on all rows."""
    import lightgbm as lgb

    n = len(X)
    if n < MIN_ROWS_FOR_STOPPING:
        return SMALL_DATA_TREES
    perm = np.random.default_rng(GBM_PARAMS["random_state"]).permutation(n)
    k = max(1, int(n * VALIDATION_SHARE))
    val, fit = perm[:k], perm[k:]
    probe = lgb.LGBMRegressor(**gbm_params(len(fit), threads), n_estimators=MAX_TREES).fit(
        X.iloc[fit], target[fit], eval_X=(X.iloc[val],), eval_y=(target[val],), eval_metric="l1",
        callbacks=[lgb.early_stopping(PATIENCE, verbose=False)])
    return max(MIN_TREES, round(probe.best_iteration_ * REFIT_SCALE))


def make_model(recipe: str, op: str, pass_: str, device: Device, dtype: str,
               threads: int | None = None) -> OpModel:
    if recipe not in RECIPES:
        raise OpatlasError(f"unknown recipe {recipe!r}; one of {', '.join(RECIPES)} "
                           f"(or reshard for per-group linear models)")
    return OpModel(recipe, op, pass_, device, dtype, threads=threads)
