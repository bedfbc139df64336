"""Gradient accumulation as a pass of its own (training.grad_accumulation_fusion false): every
micro-batch adds its weight gradients into the gradient buffer, memory-bound, on the critical
path of each pipeline device; fused (the default) it costs nothing beyond the GEMMs."""

from __future__ import annotations

import pytest

from opatlas.devices import get_device
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate.megatron import megatron_config
from opatlas.estimate.overrides import apply_overrides


def _cfg(*sets: str):
    from opatlas.estimate.config import TrainConfig

    base = load_config("llama2-7b").model_dump()  # analytical: H100, memory at 0.8 of peak
    return TrainConfig.model_validate(apply_overrides(base, list(sets)))


def _accumulation(est):
    return [it for it in est.items if it.name == "grad_accumulate"]


def _params(est) -> float:
    (opt,) = [it for it in est.items if it.category == "optimizer"]
    return opt.shape["n_params"]  # ZeRO 0: the busiest device's whole parameter count


@pytest.mark.parametrize(("grads_fp32", "per_param"), [(False, 2 + 2 * 2), (True, 2 + 2 * 4)])
def test_unfused_accumulation_reads_the_gradient_and_updates_the_buffer(grads_fp32, per_param):
    sets = ("parallel.zero=0", f"training.grads_fp32={str(grads_fp32).lower()}")
    fused = estimate_step(_cfg(*sets))
    unfused = estimate_step(_cfg(*sets, "training.grad_accumulation_fusion=false"))
    assert not _accumulation(fused)
    (it,) = _accumulation(unfused)
    h100 = get_device("H100")
    n = _params(unfused)
    # 1F1B without a pipeline (pp 1): one add per micro-batch, each bytes / (bandwidth · 0.8)
    assert it.calls == unfused.config.micro_batches == 32
    assert it.time_per_call_s == pytest.approx(per_param * n / (h100.bandwidth * 0.8), rel=1e-6)
    assert it.shape == {"n_params": round(n), "buffer_bytes": 4 if grads_fp32 else 2}
    assert unfused.step_time_s - fused.step_time_s == pytest.approx(it.time_s, rel=1e-6)
    assert unfused.breakdown["compute"] - fused.breakdown["compute"] == pytest.approx(it.time_s)


def test_zero2_accumulates_only_its_shard():
    whole = _accumulation(estimate_step(_cfg("parallel.zero=1",
                                             "training.grad_accumulation_fusion=false")))[0]
    shard = _accumulation(estimate_step(_cfg("parallel.zero=2",
                                             "training.grad_accumulation_fusion=false")))[0]
    assert shard.shape["n_params"] == pytest.approx(whole.shape["n_params"] / 32, rel=1e-6)
    assert shard.time_s == pytest.approx(whole.time_s / 32, rel=1e-6)


def test_in_a_pipeline_the_add_lengthens_every_micro_batch_and_so_the_bubble():
    sets = ("parallel.pp=4", "parallel.dp=8", "parallel.zero=0")
    fused = estimate_step(_cfg(*sets))
    unfused = estimate_step(_cfg(*sets, "training.grad_accumulation_fusion=false"))
    (it,) = _accumulation(unfused)
    bubble = unfused.breakdown["pp_bubble"] - fused.breakdown["pp_bubble"]
    # 1F1B: the bubble is (p - 1)/m of the steady part, so it grows by that share of the adds
    m = unfused.config.micro_batches
    assert bubble == pytest.approx(it.time_s * 3 / m, rel=1e-6)


def test_megatron_flag_turns_the_fusion_off():
    base = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --vocab-size 50257 --fp16 ")
    assert megatron_config(base, gpus=8).config["training"]["grad_accumulation_fusion"]
    off = megatron_config(base + "--no-gradient-accumulation-fusion", gpus=8)
    assert not off.config["training"]["grad_accumulation_fusion"]


def test_strict_data_mode_refuses_the_roofline_for_the_add():
    from opatlas.errors import OpatlasError

    cfg = _cfg("training.grad_accumulation_fusion=false", "cluster.device=NVIDIAA100-SXM4-80GB",
               "ops.mode=data", "ops.data=bundled", "ops.strict=true", "training.dtype=fp16",
               "model.attention=flash")
    with pytest.raises(OpatlasError, match="grad_accumulate/step"):
        estimate_step(cfg)
