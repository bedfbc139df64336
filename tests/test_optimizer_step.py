"""The optimizer step is more than the Adam kernel. A mixed-precision step also casts the
gradients to fp32, unscales them (fp16 only), takes their norm, casts the updated parameters
back and zeroes the gradient buffer (Megatron-LM's ``Float16OptimizerWithFloat16Params``).
Under sequence parallelism, the backward all-gathers each column-parallel input again for its
weight gradient."""

from __future__ import annotations

import pytest

from opatlas.devices import get_device
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate.config import TrainConfig, TrainingConfig
from opatlas.estimate.optimizer_step import mixed_precision_passes, step_over_adam
from opatlas.estimate.overrides import apply_overrides


def _cfg(*sets: str) -> TrainConfig:
    base = load_config("llama2-7b").model_dump()  # analytical: H100, memory at 0.8 of peak
    return TrainConfig.model_validate(apply_overrides(base, list(sets)))


# bytes a parameter, by hand from the passes: cast to fp32 (2 + 4), unscale (4 + 4), norm (4),
# cast back (4 + 2), zeroing (the buffer's width)
@pytest.mark.parametrize(("dtype", "grads_fp32", "total"), [
    ("fp16", False, 6 + 8 + 4 + 6 + 2),
    ("fp16", True, 8 + 4 + 6 + 4),
    ("bf16", False, 6 + 4 + 6 + 2),
    ("bf16", True, 4 + 6 + 4),
    ("fp32", False, 4 + 4),
])
def test_mixed_precision_passes_by_hand(dtype, grads_fp32, total):
    t = TrainingConfig(global_batch=8, dtype=dtype, grads_fp32=grads_fp32)
    passes = mixed_precision_passes(t)
    assert sum(passes.values()) == total
    assert ("unscale" in passes) == (dtype == "fp16")  # bf16 and fp32 have no loss scale
    assert step_over_adam(t) == pytest.approx((28 + total) / 28)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_optimizer_item_streams_adam_and_the_passes(dtype):
    """Analytical mode: the Adam kernel is memory-bound at 28 bytes a parameter, so the whole
    step is (28 + the passes' bytes) · n / (bandwidth · 0.8)."""
    est = estimate_step(_cfg(f"training.dtype={dtype}", "parallel.zero=0"))
    (opt,) = [it for it in est.items if it.category == "optimizer"]
    n = opt.shape["n_params"]
    per_param = 28 + sum(mixed_precision_passes(est.config.training).values())
    assert opt.shape["passes_bytes_per_param"] == per_param - 28
    assert opt.time_s == pytest.approx(per_param * n / (get_device("H100").bandwidth * 0.8),
                                       rel=1e-6)


def test_zero1_updates_its_shard_but_zeroes_its_whole_gradient_buffer():
    whole = estimate_step(_cfg("parallel.zero=0"))
    shard = estimate_step(_cfg("parallel.zero=1"))
    (opt0,) = [it for it in whole.items if it.category == "optimizer"]
    (opt1,) = [it for it in shard.items if it.category == "optimizer"]
    held, dp = opt0.shape["n_params"], shard.config.parallel.dp
    n = opt1.shape["n_params"]
    assert n == pytest.approx(held / dp, rel=1e-6)
    passes = mixed_precision_passes(shard.config.training)  # bf16, 16-bit gradients
    streamed = (28 + sum(passes.values()) - passes["zero_grads"]) * n \
        + passes["zero_grads"] * held
    assert opt1.time_s == pytest.approx(streamed / (get_device("H100").bandwidth * 0.8),
                                        rel=1e-6)
    assert opt1.shape["passes_bytes_per_param"] * n == pytest.approx(streamed - 28 * n)


def test_analyzer_counts_the_passes_bytes():
    from opatlas.analyze.sources.config import _rows

    est = estimate_step(_cfg("parallel.zero=0"))
    rows = _rows(est)
    (row,) = rows[rows["category"] == "optimizer"].to_dict("records")
    (opt,) = [it for it in est.items if it.category == "optimizer"]
    assert row["bytes"] == pytest.approx(
        (28 + opt.shape["passes_bytes_per_param"]) * opt.shape["n_params"])


def _tp(est):
    return [it for it in est.items if it.category == "tp_comm"]


def test_sequence_parallel_backward_gathers_the_column_parallel_inputs_again():
    sets = ("parallel.tp=4", "parallel.pp=2", "parallel.dp=4", "parallel.recompute=selective")
    plain = estimate_step(_cfg(*sets, "parallel.sequence_parallel=false"))
    sp = estimate_step(_cfg(*sets, "parallel.sequence_parallel=true"))
    (gather,) = [it for it in _tp(sp) if it.name == "all_gather"]
    assert not [it for it in _tp(plain) if it.name == "all_gather"]
    # the slowest device is the last (the head): 2 per layer (QKV, FC1) and the head's one
    layers = sp.stages[-1]
    assert gather.calls == sp.config.micro_batches * (2 * layers + 1)
    # one all-gather of a layer's 16-bit activation over 4 ranks in a node, alpha-beta
    c = sp.config
    act = 2.0 * c.training.micro_batch * c.model.seq_len * c.model.hidden
    link = c.cluster.intra_bw_gbps * 1e9
    assert gather.time_per_call_s == pytest.approx(
        3 / 4 * act / link + 3 * c.cluster.intra_latency_us * 1e-6, rel=1e-6)
    # the rest is the same: an all-gather and a reduce-scatter cost one all-reduce
    assert sp.breakdown["tp_comm"] - plain.breakdown["tp_comm"] == pytest.approx(gather.time_s)
