"""Orojenesis: every problem of the artifact's Fig. 1, 10, 11, 12, 13 and 14 (≈8 hours of
Timeloop mapper in the artifact), and the speed-up over the brute-force reference enumerator
measured in the same run (mappings per second on a problem small enough for it)."""

from __future__ import annotations

import time

from opatlas.bounds import frontier, gemm
from opatlas.bounds.mapspace import build_mapspace
from opatlas.bounds.problems import FIGURES
from opatlas.bounds.reference import reference_points

FIGS = ("fig1", "fig10", "fig11", "fig12", "fig13", "fig14")


def _all_figures() -> tuple[int, int]:
    tilings = mappings = 0
    for name in FIGS:
        for e in FIGURES[name]():
            f = frontier(e)
            tilings += f.tilings
            mappings += f.mapspace_size
    return tilings, mappings


def test_all_single_einsum_figures(benchmark):
    tilings, mappings = benchmark.pedantic(_all_figures, rounds=3, iterations=1)
    seconds = benchmark.stats.stats.median
    benchmark.extra_info.update(tilings=tilings, mappings=mappings, seconds=seconds,
                                mappings_per_s=mappings / seconds,
                                vs_artifact_8h=8 * 3600 / seconds)
    # reference enumerator, same run: mappings per second on a small GEMM
    small = gemm(24, 16, 24)
    t0 = time.perf_counter()
    ref = len(reference_points(small))
    ref_rate = ref / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(20):
        fast = build_mapspace(small).mapping_count()
    fast_small_rate = 20 * fast / (time.perf_counter() - t0)
    benchmark.extra_info.update(reference_mappings_per_s=ref_rate,
                                speedup_same_problem=fast_small_rate / ref_rate,
                                speedup_figures_vs_reference=(mappings / seconds) / ref_rate)
    assert fast == ref
    print(f"\nfigures: {mappings:,} mappings ({tilings:,} tilings) in {seconds:.2f} s; "
          f"reference {ref_rate:,.0f} mappings/s; speed-up {mappings / seconds / ref_rate:,.0f}x "
          f"(figures) / {fast_small_rate / ref_rate:,.0f}x (same small problem)")


def test_highly_composite_gemm(benchmark):
    """720720³: 240 divisors a rank, 13.8 M tilings, streamed and pruned (the exhaustive
    search took about a minute and 3.7 GB)."""
    f = benchmark.pedantic(lambda: frontier(gemm(720720, 720720, 720720)), rounds=3,
                           iterations=1)
    benchmark.extra_info.update(tilings=f.tilings, points=len(f.buffer))
