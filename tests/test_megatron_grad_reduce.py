"""--grad-reduce-in-bf16 as Megatron-LM's validate_args applies it: under bf16 it turns off the
fp32 gradient buffer (and wins over --accumulate-allreduce-grads-in-fp32); elsewhere it does
nothing."""

from __future__ import annotations

import pytest

from opatlas.estimate.megatron import megatron_config

BASE = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
        "--max-position-embeddings 2048 --vocab-size 32000 --micro-batch-size 1 "
        "--global-batch-size 8 ")


@pytest.mark.parametrize(("flags", "fp32"), [
    ("--bf16", True),
    ("--bf16 --grad-reduce-in-bf16", False),
    ("--bf16 --grad-reduce-in-bf16 --accumulate-allreduce-grads-in-fp32", False),
    ("--fp16", False),
    ("--fp16 --grad-reduce-in-bf16", False),
    ("--fp16 --accumulate-allreduce-grads-in-fp32", True),
])
def test_the_gradient_buffer_dtype_follows_megatron(flags, fp32):
    run = megatron_config(BASE + flags, gpus=8)
    assert run.config["training"]["grads_fp32"] is fp32
    assert not any("grad-reduce-in-bf16" in n and "not modelled" in n.lower() for n in run.notes)


def test_bf16_reduction_is_said():
    run = megatron_config(BASE + "--bf16 --grad-reduce-in-bf16", gpus=8)
    assert any("reduced in bf16" in n for n in run.notes)
