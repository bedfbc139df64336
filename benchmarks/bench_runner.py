"""Runner overhead: vectors per second of the runner itself on a no-op op (CPU backend)."""

from __future__ import annotations

from opatlas.run import RunConfig, run_spec
from opatlas.spec import spec_from_mapping
from opatlas.store import Store

N = 2000


def test_runner_overhead_noop(benchmark, tmp_path):
    spec = spec_from_mapping({"op": "noop", "params": {"i": list(range(N))}, "repeats": 1,
                              "warmup": 0})
    counter = iter(range(10_000))

    def once():
        with Store(tmp_path / f"s{next(counter)}.duckdb") as st:
            return run_spec(spec, st, RunConfig(interactive=False, log_every=10**9))

    summary = benchmark.pedantic(once, rounds=3, iterations=1)
    assert summary.ran == N
    benchmark.extra_info["vectors_per_s"] = N / benchmark.stats.stats.median
