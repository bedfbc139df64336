"""Estimate inputs: mapping Megatron-LM arguments and a Hugging Face config.json to a validated
config (interactive-speed goal: well under the estimate itself), and a search ranked by time to
train (the ranking must add nothing noticeable to the search)."""

from __future__ import annotations

from pathlib import Path

from opatlas.estimate import load_config, search
from opatlas.estimate.inputs import load_inputs
from opatlas.estimate.run import rank_by_run

ARGS = Path(__file__).resolve().parents[1] / "examples" / "megatron" / "gpt3-175b.args"


def test_megatron_args_to_config(benchmark):
    inputs = benchmark(lambda: load_inputs(megatron_args=f"@{ARGS}", gpus=1024,
                                           sets=["cluster.preset=dgx-h100"]))
    assert inputs.config.gpus == 1024


def test_hf_config_to_config(benchmark):
    cfg = benchmark(lambda: load_config("llama-3.1-70b"))
    assert cfg.model.layers == 80


def test_search_ranked_by_time_to_train(benchmark):
    cfg = load_config("llama2-7b")

    def ranked() -> list:
        fits, _, _ = search(cfg, 64, top=10**9)
        return rank_by_run(fits, tokens=2e12)[:10]

    assert len(benchmark.pedantic(ranked, rounds=3, iterations=1)) == 10
