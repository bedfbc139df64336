"""Runner throughput on the CUDA backend for a ~20 µs op and a ~1 ms op, and the GPU busy
fraction (Σ measured op time / wall time of the sweep, the worker's start-up included). Goal:
busy ≥ 80%. Each case runs with the spec's 20 repeats and with ``min_time_ms=10`` (repeats grow
to fill 10 ms per pass). Needs a GPU; scripts/gpu_runner_profile.py breaks a vector's time down."""

from __future__ import annotations

import pytest

from opatlas.run import RunConfig, run_spec
from opatlas.spec import spec_from_mapping
from opatlas.store import Store

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

CASES = {  # bf16 linears: ~20 µs and ~1 ms on an H100
    "20us": {"b": [1], "l": list(range(1024, 1024 + 64 * 64, 64)), "dim": [2048], "role": ["out"]},
    "1ms": {"b": [1], "l": list(range(8192, 8192 + 64 * 32, 64)), "dim": [8192], "role": ["out"]},
}


@pytest.mark.parametrize("min_time_ms", [0, 10])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_runner_throughput(benchmark, tmp_path, case, min_time_ms):
    spec = spec_from_mapping({"op": "linear", "params": CASES[case], "dtype": "bf16",
                              "passes": ["fwd"], "repeats": 20, "warmup": 3})
    counter = iter(range(100))

    def once():
        with Store(tmp_path / f"s{next(counter)}.duckdb") as st:
            options = {"min_time_ms": min_time_ms} if min_time_ms else {}
            summary = run_spec(spec, st, RunConfig(backend="cuda", interactive=False,
                                                   backend_options=options))
            busy_ns = float((st.results()["mean_ns"] * st.results()["repeats"]).sum())
        return summary, busy_ns

    summary, busy_ns = benchmark.pedantic(once, rounds=2, iterations=1)
    wall = benchmark.stats.stats.median
    benchmark.extra_info.update(vectors_per_s=summary.ran / wall, gpu_busy=busy_ns / 1e9 / wall)
