"""Runtime models: batched prediction throughput (goal ≥ 500,000 op predictions/s on the 2-core
machine) and the time to fit every bundled (op, pass) model (goal ≤ 60 s)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from opatlas.devices import get_device
from opatlas.fit.data import load_op_data, shapes_of
from opatlas.fit.recipes import make_model
from opatlas.predict import Predictor

N = 500_000


def _shapes(workload: str) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    if workload == "all-distinct":  # 500,000 different (mp, b, l, dim) labels
        grid = np.stack(np.meshgrid([1, 2, 4, 8], np.arange(1, 17), np.arange(1, 65),
                                    np.arange(8, 136), indexing="ij"), -1).reshape(-1, 4)
        mp, b, l, dim = grid[rng.choice(len(grid), N, replace=False)].T
        return pd.DataFrame({"mp": mp, "b": b, "l": l * 128, "dim": dim * 128})
    n_dims = {"random": 120, "search": 13}[workload]
    return pd.DataFrame({"mp": rng.choice([1, 2, 4, 8], N), "b": rng.choice([1, 2, 4, 8], N),
                         "l": rng.integers(1, 64, N) * 128,
                         "dim": rng.integers(8, 8 + n_dims, N) * 128})


# random: 4·4·63·120 = 120,960 possible shapes (≈ 4 repeats each); search: a config-search-like
# workload of 4·4·63·13 = 13,104 shapes (≈ 38 repeats each). predict() evaluates each distinct
# shape, and each distinct feature vector (the same kernel work under other labels), once.
@pytest.mark.parametrize("workload", ["all-distinct", "random", "search"])
def test_batched_prediction_throughput(benchmark, tmp_path, workload):
    pred = Predictor(cache_dir=tmp_path)
    shapes = _shapes(workload)
    pred.predict("linear1", shapes.head(5000))  # fit, and compile the tree kernel, untimed
    out = benchmark.pedantic(lambda: pred.predict("linear1", shapes), rounds=3, iterations=1)
    assert out.shape == (N,) and np.isfinite(out).all()
    benchmark.extra_info["predictions_per_s"] = N / benchmark.stats.stats.median


def test_fit_all_bundled_ops(benchmark):
    data = load_op_data()
    dev = get_device("A100")

    def fit_all() -> int:
        n = 0
        for (op, pass_), g in data.groupby(["op", "pass"]):
            make_model("hybrid", op, pass_, dev, "fp16").fit(shapes_of(g), g["y_us"].to_numpy())
            n += 1
        return n

    n = benchmark.pedantic(fit_all, rounds=1, iterations=1)
    benchmark.extra_info.update(models=n, seconds=benchmark.stats.stats.median)
