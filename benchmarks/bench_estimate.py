"""Training-step estimator: one warm estimate (goal ≤ 0.2 s; upstream ≈ 2.7 s) and a search
over ≥ 1,000 layouts (goal ≤ 5 s)."""

from __future__ import annotations

from opatlas.estimate import estimate_step, load_config, search


def test_one_warm_estimate_with_data(benchmark):
    cfg = load_config("llemma_7b_4_2_2_P")
    estimate_step(cfg)  # models fitted or loaded: warm
    e = benchmark.pedantic(lambda: estimate_step(cfg), rounds=5, iterations=1)
    benchmark.extra_info["step_time_s"] = e.step_time_s


def test_search_over_1000_layouts(benchmark):
    cfg = load_config("llama2-7b")
    _, n, _ = benchmark.pedantic(lambda: search(cfg, 64, 10), rounds=3, iterations=1)
    assert n >= 1000
    benchmark.extra_info["layouts"] = n
