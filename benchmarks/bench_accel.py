"""Fig. 24b: the Simba-like accelerator, 4096³ GEMM, GlobalBuffer 0.125–512 KB, 2,000 valid
mappings per size (the artifact: Timeloop's mapper, ≈ 3 min per size; goal here ≤ 60 s for
all five on 2 cores). Two numbers: the whole sweep as `opatlas bound accel` runs it (the
bound and 40 rounds of local search per size included), and the mapper alone in valid mappings
per second (drawing, checking, de-duplicating and evaluating)."""

from __future__ import annotations

import time

from opatlas.bounds import frontier, gemm
from opatlas.bounds.accel import sample_mappings
from opatlas.bounds.accel_report import FIG24B_SIZES_KB, sweep_buffer_sizes
from opatlas.bounds.arch import load_arch

GEMM = gemm(4096, 4096, 4096)
SIMBA = load_arch("simba")


def test_fig24b_sweep(benchmark):
    sweep = benchmark.pedantic(
        lambda: sweep_buffer_sizes(GEMM, SIMBA, mappings=2000, search_rounds=40),
        rounds=3, iterations=1)
    seconds = benchmark.stats.stats.median
    assert len(sweep.points) == 5 * 2000
    assert not sweep.points["below_bound_at_tile"].any()
    assert not sweep.searched["below_bound_at_tile"].any()
    benchmark.extra_info.update(seconds=seconds, mappings=len(sweep.points),
                                vs_artifact_15min=15 * 60 / seconds)
    print(f"\nFig. 24b sweep: {len(sweep.points):,} mappings in {seconds:.2f} s "
          f"({15 * 60 / seconds:,.0f}x the artifact's ≈ 15 min)")


def test_mapper_rate(benchmark):
    frontier(GEMM)  # warm numpy paths outside the timed part

    def run() -> tuple[int, int]:
        found = drawn = 0
        for k, kb in enumerate(FIG24B_SIZES_KB):
            ms = sample_mappings(GEMM, SIMBA.with_size("GlobalBuffer", kb * 1024), 2000, seed=k)
            found += len(ms)
            drawn += ms.candidates
        return found, drawn

    t0 = time.perf_counter()
    found, drawn = benchmark.pedantic(run, rounds=3, iterations=1)
    seconds = benchmark.stats.stats.median
    benchmark.extra_info.update(valid_mappings_per_s=found / seconds,
                                candidates_per_s=drawn / seconds, candidates=drawn)
    print(f"\nmapper: {found:,} valid mappings of {drawn:,} drawn in {seconds:.2f} s: "
          f"{found / seconds:,.0f} valid mappings/s, {drawn / seconds:,.0f} candidates/s "
          f"(wall incl. rounds {time.perf_counter() - t0:.1f} s)")
