"""Wormhole reshard simulator: vectors simulated per second on a fixed mixed sample of the
seed's sweep (60 random suites, 50 vectors each), the per-vector cost that the full
2.9-million-vector simulated sweep pays."""

from __future__ import annotations

import numpy as np

from opatlas.tenstorrent.reshard import STRATEGIES, expand_suite, grid_pairs
from opatlas.tenstorrent.sim import WormholeParams, simulate


def _vectors() -> list[tuple]:
    rng = np.random.default_rng(0)
    pairs = list(grid_pairs())
    out = []
    for i in rng.choice(len(pairs), 60, replace=False):
        gin, gout = pairs[i]
        s = expand_suite(gin, gout)
        for k in rng.choice(len(s), min(50, len(s)), replace=False):
            out.append((int(s.ht[k]), int(s.wt[k]), gin, STRATEGIES[s.sin[k]], gout,
                        STRATEGIES[s.sout[k]]))
    return out


def test_simulated_vectors_per_second(benchmark):
    vecs = _vectors()
    p = WormholeParams()

    def run() -> list[float]:
        return [simulate(*v, p).time_ns for v in vecs]

    times = benchmark.pedantic(run, rounds=3, iterations=1)
    assert len(times) == 3000 and all(t > p.launch_ns for t in times)
