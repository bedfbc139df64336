"""Data-parallel traffic per ZeRO stage: sharded gradients are reduced after every
micro-batch, fp32 gradients travel and sit at 4 bytes, hidden traffic stays listed, and
what the links carry beyond the step's compute cannot hide."""

from __future__ import annotations

import pytest

from opatlas.estimate import estimate_step, load_config
from opatlas.estimate.overrides import apply_overrides


def _cfg(*sets: str):
    from opatlas.estimate.config import TrainConfig

    base = load_config("llama2-7b").model_dump()
    return TrainConfig.model_validate(apply_overrides(base, list(sets)))


def _dp(est) -> dict[str, dict]:
    return {it.shape["role"]: it for it in est.items if it.category == "dp_comm"}


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_sharded_gradients_are_reduced_every_micro_batch(zero):
    e = estimate_step(_cfg(f"parallel.zero={zero}", "parallel.dp_overlap=false"))
    nmb = e.config.micro_batches
    one = estimate_step(_cfg("parallel.zero=1", "parallel.dp_overlap=false"))
    grads, base = _dp(e)["gradients"], _dp(one)["gradients"]
    reductions = nmb if zero >= 2 else 1
    assert grads.calls == base.calls * reductions
    assert grads.name == ("reduce_scatter" if zero >= 1 else "all_reduce")
    if zero == 3:  # the weights gathered for every forward and backward
        assert _dp(e)["parameters"].calls == 2 * nmb * _dp(one)["parameters"].calls


def test_hidden_traffic_is_listed_and_the_links_cap_what_hides():
    e = estimate_step(_cfg("parallel.zero=3"))
    for it in _dp(e).values():
        total = it.time_s + it.shape["overlapped_s"]
        assert total > 0 and it.shape["overlapped_s"] >= 0
    compute = sum(it.time_s for it in e.items if it.category == "compute")
    carried = sum(it.time_s + it.shape["overlapped_s"] for it in _dp(e).values())
    exposed = sum(it.time_s for it in _dp(e).values())
    assert exposed >= carried - compute - 1e-9  # nothing beyond the compute window hides


def test_fp32_gradients_double_their_memory_and_their_traffic():
    two = estimate_step(_cfg("parallel.dp_overlap=false"))
    four = estimate_step(_cfg("parallel.dp_overlap=false", "training.grads_fp32=true"))
    assert four.memory.gradients == pytest.approx(2 * two.memory.gradients)
    assert four.memory.weights == pytest.approx(two.memory.weights)
    assert _dp(four)["gradients"].shape["bytes"] == pytest.approx(
        2 * _dp(two)["gradients"].shape["bytes"])
    assert _dp(four)["parameters"].shape["bytes"] == _dp(two)["parameters"].shape["bytes"]
