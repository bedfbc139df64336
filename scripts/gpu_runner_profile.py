"""Where a sweep's time goes on a GPU, per vector (run ON a GPU machine): the backend alone
(build, warm-up, timed repeats), one worker's round trip, and a whole ``run_spec`` under
cProfile. For the runner-throughput goal (GPU busy >= 80% on ops of >= 20 µs).

    python3 scripts/gpu_runner_profile.py [--backend cuda] [--min-time-ms 0 10]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import tempfile
import time
from pathlib import Path

# bf16 linears of about 20 µs on an H100 (benchmarks/bench_cuda_runner.py's "20us" case)
LS = list(range(1024, 1024 + 64 * 64, 64))


def params(l_: int) -> dict:
    return {"b": 1, "l": l_, "dim": 2048, "role": "out", "dtype": "bf16"}


def backend_alone(backend_name: str, options: dict) -> None:
    from opatlas.backends import get_backend
    from opatlas.ops.registry import resolved_params

    be = get_backend(backend_name, **options)
    be.start()
    walls, busy = [], []
    for l_ in LS:
        op, p = resolved_params("linear", params(l_))
        t = time.perf_counter()
        ns = be.measure(op, p, ["fwd"], 20, 3)["fwd"]
        walls.append(time.perf_counter() - t)
        busy.append(sum(ns) / 1e9)
    print(f"backend alone {options}: {statistics.median(walls) * 1e3:.2f} ms/vector (median), "
          f"{len(ns)} samples of {statistics.median(ns) / 1e3:.1f} µs, busy "
          f"{sum(busy) / sum(walls):.1%}")


def worker_round_trip(backend_name: str, options: dict) -> None:
    from opatlas.run.worker import WorkerHandle

    w = WorkerHandle(backend_name, backend_options=options)
    t = time.perf_counter()
    w.run("linear", params(LS[0]), ["fwd"], 20, 3, 120)
    start = time.perf_counter() - t
    walls, busy = [], 0.0
    for l_ in LS:
        t = time.perf_counter()
        out = w.run("linear", params(l_), ["fwd"], 20, 3, 120)
        walls.append(time.perf_counter() - t)
        busy += sum((out.timings or {}).get("fwd", [])) / 1e9
    w.close()
    print(f"worker {options}: start-up {start:.2f} s, then {statistics.median(walls) * 1e3:.2f} "
          f"ms/vector (median), max {max(walls) * 1e3:.1f} ms ({out.status}), busy after "
          f"start-up {busy / sum(walls):.1%}")


def whole_run(backend_name: str, options: dict) -> None:
    from opatlas.run import RunConfig, run_spec
    from opatlas.spec import spec_from_mapping
    from opatlas.store import Store

    spec = spec_from_mapping({"op": "linear", "params": {"b": [1], "l": LS, "dim": [2048],
                                                         "role": ["out"]},
                              "dtype": "bf16", "passes": ["fwd"], "repeats": 20, "warmup": 3})
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "s.duckdb") as st:
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        run_spec(spec, st, RunConfig(backend=backend_name, interactive=False,
                                     backend_options=options))
        prof.disable()
        wall = time.perf_counter() - t
        rows = st.results()
        busy = float((rows["mean_ns"] * rows["repeats"]).sum()) / 1e9
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    print(f"run_spec {options}: {wall:.2f} s for {len(LS)} vectors, busy {busy / wall:.1%}")
    print(buf.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--min-time-ms", type=float, nargs="*", default=[0])
    args = ap.parse_args()
    for ms in args.min_time_ms:
        options = {"min_time_ms": ms} if ms else {}
        backend_alone(args.backend, options)
        worker_round_trip(args.backend, options)
        whole_run(args.backend, options)


if __name__ == "__main__":
    main()
