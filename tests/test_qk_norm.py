"""Query and key norms (``model.qk_norm``: Qwen3, Megatron-LM's --qk-layernorm): one head's
width of weights each, a norm over every head of a rank before attention, and their inputs
kept for the backward."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate import model as pm
from opatlas.estimate.config import ModelConfig, TrainConfig
from opatlas.estimate.hf import map_hf_config
from opatlas.estimate.megatron import megatron_config
from opatlas.estimate.memory import activation_bytes_per_layer
from opatlas.estimate.overrides import apply_overrides

QWEN3_8B = json.loads((REPO / "src/opatlas/data/hf/qwen3-8b.json").read_text())


def _qwen3_06b() -> ModelConfig:
    cfg = {**QWEN3_8B, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
           "num_attention_heads": 16, "num_key_value_heads": 8, "tie_word_embeddings": True}
    return ModelConfig(**map_hf_config(cfg, "qwen3-0.6b.json").fields)


def test_qwen3_counts_its_query_and_key_norms_by_hand():
    m = _qwen3_06b()
    assert m.qk_norm and m.hd == 128
    attention = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024  # q, k, v (8 heads of 128), out
    mlp = 3 * 1024 * 3072
    norms = 2 * 1024 + 2 * 128  # two RMSNorms of the hidden size, q and k norms of one head
    assert pm.qk_norm_params(m) == 256
    assert pm.layer_params(m) == attention + mlp + norms
    # 28 layers, the tied 151,936-row embedding and the final norm: Qwen3-0.6B's "0.6B"
    assert pm.total_params(m) == 28 * (attention + mlp + norms) + 151936 * 1024 + 1024
    assert "not counted" not in " ".join(map_hf_config(QWEN3_8B, "qwen3-8b.json").assumed)


def test_layernorm_qk_norms_have_biases_too():
    m = ModelConfig(layers=1, hidden=1024, heads=8, seq_len=128, norm="layernorm", qk_norm=True)
    assert pm.qk_norm_params(m) == 2 * 2 * 128
    assert pm.qk_norm_params(m.model_copy(update={"qk_norm": False})) == 0


def _cfg(*sets: str) -> TrainConfig:
    base = load_config("llama2-7b").model_dump()  # 32 heads of 128, analytical
    return TrainConfig.model_validate(apply_overrides(base, ["model.qk_norm=true", *sets]))


def _norm_rows(est) -> list:
    return [it for it in est.items
            if it.name == "RMSlayernorm" and it.pass_ == "fwd" and it.shape["dim"] == 128]


@pytest.mark.parametrize(("tp", "kv", "q_rows", "k_rows"), [
    (2, 8, 16, 4),    # 32 query heads over 2 ranks, 8 key heads over 2
    (8, 8, 4, 1),     # one key head on each rank
])
def test_one_norm_over_every_head_of_a_rank(tp, kv, q_rows, k_rows):
    est = estimate_step(_cfg(f"parallel.tp={tp}", f"model.kv_heads={kv}", "parallel.dp=1",
                             "parallel.sequence_parallel=false"))
    seq = est.config.model.seq_len
    q, k = _norm_rows(est)
    assert (q.shape["l"], k.shape["l"]) == (seq * q_rows, seq * k_rows)
    (hidden,) = [it for it in est.items if it.name == "RMSlayernorm" and it.pass_ == "fwd"
                 and it.shape["dim"] == 4096 and it.calls > est.config.micro_batches]
    # memory-bound: a norm over seq·heads rows of 128 costs heads·128/4096 of the hidden one
    assert q.time_per_call_s == pytest.approx(hidden.time_per_call_s * q_rows * 128 / 4096,
                                              rel=0.02)


def test_as_many_key_heads_as_query_heads_is_one_row_of_two_calls():
    est = estimate_step(_cfg("parallel.tp=1", "model.kv_heads=32"))
    (row,) = _norm_rows(est)
    assert row.calls == 2 * est.config.micro_batches * est.config.model.layers


def test_without_qk_norm_nothing_changes():
    plain = estimate_step(load_config("llama2-7b"))
    off = estimate_step(_cfg("model.qk_norm=false"))
    assert off.step_time_s == plain.step_time_s and not _norm_rows(off)


def test_their_inputs_are_kept_for_the_backward():
    m = _qwen3_06b()
    off = m.model_copy(update={"qk_norm": False})
    for recompute, kept in (("selective", 2.0 * (2048 + 1024) / 2), ("full", 0.0)):
        extra = activation_bytes_per_layer(m, 1, 2, False, recompute) - \
            activation_bytes_per_layer(off, 1, 2, False, recompute)
        assert extra == pytest.approx(kept * m.seq_len)


def test_megatron_qk_layernorm_flag():
    base = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --vocab-size 50257 ")
    assert not megatron_config(base, gpus=8).config["model"]["qk_norm"]
    run = megatron_config(base + "--qk-layernorm --normalization RMSNorm", gpus=8)
    assert run.config["model"]["qk_norm"] and run.config["model"]["norm"] == "rmsnorm"
