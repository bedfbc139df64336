"""The Ray executor against the local runner, in one run.

1. Dispatch overhead on a no-op op (CPU backend, the guarded worker process per vector): the
   local runner (one worker) and the Ray path on a simulated cluster (a head with no CPUs and
   ``NODES`` nodes of one CPU each, one worker per node) at chunk sizes 1, 16 and 256.
   Rates are steady-state: vectors over the span between the first and the last result row,
   so start-up (Ray, the actors, the guarded process: seconds on a loaded machine, and noisy)
   is left out and what is left is the cost per vector. The Ray rate is
   also given per worker, which is what the goal (>= 0.8x the local runner) compares; with one
   worker too, which isolates the engine's cost from CPU contention on a 2-core machine.
2. The driver's memory over a long sweep on an in-process simulated backend (no device work),
   ``OPATLAS_BENCH_RAY_MEMORY_N`` vectors (default 100,000; RESULTS.md says what was run):
   RSS sampled every 0.5 s from before the expansion to the end (phases: recording the sweep
   batch by batch, then the dispatch, which expands the vectors again as chunks are taken),
   what DuckDB's own buffers hold at the end and the store's memory limit then
   (``OPATLAS_STORE_MEMORY_LIMIT``, 64 MB unless set; raised only if a write needs more).

Run: ``pytest benchmarks/bench_ray.py --benchmark-only -s`` (prints the tables).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from opatlas.run import RunConfig, run_spec
from opatlas.run.ray_executor import RayConfig, RayDispatcher, run_spec_ray
from opatlas.run.runner import prepare_run
from opatlas.spec import spec_from_mapping
from opatlas.store import Store

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

NODES = 2
N = 3000
CHUNKS = (1, 16, 256)
MEMORY_N = int(os.environ.get("OPATLAS_BENCH_RAY_MEMORY_N", "100000"))
OBJECT_STORE = 100 * 2**20

SIM_BACKEND = '''
"""An in-process simulated backend for the memory benchmark: a fixed 1 us, no device work."""
from opatlas.backends import register_backend
from opatlas.backends.base import Backend


class BenchSim(Backend):
    name = "bench-sim"
    in_process = True

    def device_name(self):
        return "bench-sim"

    def measure(self, op, params, passes, repeats, warmup):
        return {p: [1000] * repeats for p in passes}


register_backend("bench-sim", __name__ + ":BenchSim")
'''

RATES: dict[Any, float] = {}  # "local" or (chunk, workers)


def noop_spec(n: int):
    return spec_from_mapping({"name": f"noop{n}", "op": "noop", "params": {"i": list(range(n))},
                              "repeats": 1, "warmup": 0})


@pytest.fixture(scope="module")
def sim_module(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "bench_sim_backend.py"
    path.write_text(SIM_BACKEND)
    return path


@pytest.fixture(scope="module")
def cluster(sim_module):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        c = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=0, object_store_memory=OBJECT_STORE, include_dashboard=False))
        try:
            for _ in range(NODES):
                c.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
            c.wait_for_nodes()
            ray.init(address=c.address, runtime_env={"py_modules": [str(sim_module)]})
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


def quiet() -> RunConfig:
    return RunConfig(interactive=False, log_every=10**9)


def steady_rate(run) -> float:
    """Vectors per second between the first and the last result row (their ``created_at``,
    stamped where the vector ran): start-up (Ray, actors, the guarded process) is left out, and
    a driver that cannot keep up still shows, since at most two calls per worker are in flight."""
    path, summary = run(N)
    assert summary.ran == N and summary.statuses == {"ok": N}
    with Store(path) as st:
        span_s = st.con.execute("SELECT epoch_us(max(created_at)) - epoch_us(min(created_at)) "
                                "FROM results").fetchall()[0][0] / 1e6
    return (N - 1) / span_s


def test_local_runner_noop(benchmark, tmp_path):
    def run(n):
        path = tmp_path / f"local{n}-{time.monotonic_ns()}.duckdb"
        with Store(path) as st:
            return path, run_spec(noop_spec(n), st, quiet())

    rate = benchmark.pedantic(steady_rate, args=(run,), rounds=1, iterations=1)
    RATES["local"] = rate
    benchmark.extra_info["vectors_per_s"] = rate


@pytest.mark.parametrize("workers", (NODES, 1))
@pytest.mark.parametrize("chunk", CHUNKS)
def test_ray_noop(benchmark, cluster, tmp_path, chunk, workers):
    """``workers`` = 1 isolates the engine's own cost from CPU contention on a small machine."""
    def run(n):
        path = tmp_path / f"ray{n}-{time.monotonic_ns()}.duckdb"
        with Store(path) as st:
            return path, run_spec_ray(noop_spec(n), st, quiet(),
                                      RayConfig(chunk=chunk, resource="CPU", max_workers=workers))

    rate = benchmark.pedantic(steady_rate, args=(run,), rounds=1, iterations=1)
    RATES[(chunk, workers)] = rate
    benchmark.extra_info.update(vectors_per_s=rate, per_worker=rate / workers, workers=workers)


@pytest.fixture(scope="module", autouse=True)
def ratio_table():
    """Prints the comparison once the rates are in (a benchmark, not a timed assertion)."""
    yield
    if "local" not in RATES:
        return
    local = RATES["local"]
    print("\n| executor | workers | vectors/s | per worker | per worker / local |")
    print("|---|---|---|---|---|")
    print(f"| local runner | 1 | {local:,.0f} | {local:,.0f} | 1.00 |")
    for (chunk, workers), rate in sorted((k, v) for k, v in RATES.items() if k != "local"):
        print(f"| ray, chunk {chunk} | {workers} | {rate:,.0f} | {rate / workers:,.0f} | "
              f"{rate / workers / local:.2f} |")


class RssSampler(threading.Thread):
    """This process's RSS every ``period`` seconds, with the time and a phase label."""

    def __init__(self, period: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.period, self.phase = period, "start"
        self.samples: list[tuple[float, str, float]] = []
        self.blocks: list[int] = []  # Python objects alive: flat if nothing piles up
        self.stop = threading.Event()
        self.proc = psutil.Process()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.is_set():
            self.samples.append((time.monotonic() - t0, self.phase,
                                 self.proc.memory_info().rss / 2**20))
            self.blocks.append(sys.getallocatedblocks())
            self.stop.wait(self.period)


def test_driver_memory_over_a_long_simulated_sweep(benchmark, cluster, sim_module, tmp_path):
    spec = spec_from_mapping({"name": "long", "op": "noop", "params": {"i": list(range(MEMORY_N))},
                              "repeats": 1, "warmup": 0})
    cfg = RunConfig(backend="bench-sim", interactive=False, log_every=10**9,
                    ops_modules=[str(sim_module)])
    sampler = RssSampler()
    done: list[float] = []
    duckdb_mb: list[float] = []  # what the store's own buffers hold at the end
    limit: list[int | None] = []  # the store's memory limit at the end (it grows if needed)

    def run():
        sampler.start()
        with Store(tmp_path / "long.duckdb") as st:
            sampler.phase = "expand+record"
            plan = prepare_run(spec, st, cfg)
            sampler.phase = "dispatch"
            dispatcher = RayDispatcher(ray, st, plan, cfg,
                                       RayConfig(chunk=256, resource="CPU"),
                                       on_result=lambda r: done.append(time.monotonic()))
            summary = dispatcher.run()
            duckdb_mb.append(st.con.execute(
                "SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchall()[0][0] / 2**20)
            limit.append(st.memory_limit)
        sampler.stop.set()
        sampler.join()
        return summary

    summary = benchmark.pedantic(run, rounds=1, iterations=1)
    assert summary.ran == MEMORY_N
    dispatch = [rss for _, phase, rss in sampler.samples if phase == "dispatch"]
    before = [rss for _, phase, rss in sampler.samples if phase == "start"]
    recording = [rss for _, phase, rss in sampler.samples if phase == "expand+record"]
    blocks_dispatch = [b for (_, phase, _), b in zip(sampler.samples, sampler.blocks, strict=False)
                       if phase == "dispatch"]
    quarter = max(1, len(dispatch) // 4)
    stats = {"vectors": MEMORY_N, "rss_before_mb": before[0] if before else None,
             "rss_peak_mb": max(rss for *_, rss in sampler.samples),
             "expand_record_peak_mb": max(recording, default=0.0),
             "dispatch_start_mb": dispatch[0] if dispatch else 0.0,
             "dispatch_end_mb": dispatch[-1] if dispatch else 0.0,
             "duckdb_limit_mb": (limit[0] or 0) / 2**20,
             "dispatch_first_quarter_mb": max(dispatch[:quarter]),
             "dispatch_last_quarter_mb": max(dispatch[-quarter:]),
             "dispatch_s": done[-1] - done[0] if len(done) > 1 else 0.0,
             "vectors_per_s": summary.rate, "duckdb_buffers_mb": duckdb_mb[0],
             "py_blocks_dispatch_start": blocks_dispatch[0] if blocks_dispatch else 0,
             "py_blocks_dispatch_end": blocks_dispatch[-1] if blocks_dispatch else 0}
    benchmark.extra_info.update(stats)
    print("\n" + " ".join(f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in stats.items()))
    step = max(1, len(sampler.samples) // 20)
    for t, phase, rss in sampler.samples[::step]:
        print(f"  t={t:7.1f} s  {phase:<14} rss={rss:7.1f} MB")
    t, phase, rss = max(sampler.samples, key=lambda s: s[2])
    print(f"  peak: t={t:7.1f} s  {phase:<14} rss={rss:7.1f} MB")
