"""The compiled (QuickScorer) tree evaluation gives LightGBM's own predictions, bit for bit, and
declines models it does not cover."""

from __future__ import annotations

import warnings

import lightgbm as lgb
import numpy as np
import pytest

from opatlas.fit.compiled import MIN_ROWS, CompiledTrees, predict_raw


def _fit(objective: str = "l1", **extra) -> lgb.Booster:
    rng = np.random.default_rng(3)
    X = rng.uniform(-5, 5, (3000, 4))
    y = np.sin(X[:, 0]) * X[:, 1] + (X[:, 2] > 1) + 0.1 * rng.normal(size=3000)
    if objective == "poisson":
        y = np.exp(y / 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lgb.LGBMRegressor(n_estimators=150, num_leaves=40, objective=objective,
                                 verbose=-1, **extra).fit(X, y).booster_


def test_compiled_trees_match_lightgbm_exactly_including_ties_and_out_of_range():
    booster = _fit()
    trees = CompiledTrees.from_booster(booster)
    assert trees is not None and len(trees.leaf_base) == booster.num_trees()
    rng = np.random.default_rng(0)
    X = rng.uniform(-8, 8, (10_001, 4))  # not a multiple of the block size
    # rows sitting exactly on split thresholds must go left, as in LightGBM (x <= threshold)
    on = rng.integers(0, len(trees.threshold), 2000)
    X[:2000, :] = 0.0
    X[np.arange(2000), trees.feature[on]] = trees.threshold[on]
    X[-5:] = [[1e300, -1e300, np.inf, -np.inf]] * 5
    expected = booster.predict(X)
    np.testing.assert_array_equal(trees.predict(X), expected)
    np.testing.assert_array_equal(predict_raw(booster, trees, X), expected)


def test_rows_with_nan_and_small_batches_take_lightgbm_path():
    booster = _fit()
    trees = CompiledTrees.from_booster(booster)
    X = np.random.default_rng(1).uniform(-5, 5, (MIN_ROWS + 10, 4))
    X[7, 2] = np.nan  # LightGBM's missing-value rule applies: not compiled
    np.testing.assert_array_equal(predict_raw(booster, trees, X), booster.predict(X))
    np.testing.assert_array_equal(predict_raw(booster, trees, X[8:20]), booster.predict(X[8:20]))


@pytest.mark.parametrize("case", ["poisson", "nan-aware splits"])
def test_models_outside_the_compiled_subset_are_declined(case):
    if case == "poisson":  # predictions are exp(raw score): not the raw sum of leaves
        booster = _fit("poisson")
    else:
        rng = np.random.default_rng(2)
        X = rng.uniform(0, 1, (500, 2))
        X[rng.uniform(size=500) < 0.2, 0] = np.nan  # trained with NaN: splits learn a side
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            booster = lgb.LGBMRegressor(n_estimators=20, verbose=-1).fit(
                X, np.nan_to_num(X[:, 0], nan=3.0) + X[:, 1]).booster_
    assert CompiledTrees.from_booster(booster) is None
