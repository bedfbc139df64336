"""Query and key norms (``model.qk_norm``). ``head`` (Qwen3, Megatron-LM's --qk-layernorm): one
head's width of weights each, a norm over every head of a rank before attention. ``full``
(OLMo 2): one norm over all query heads and one over all key heads of a token. Their inputs
are kept for the backward."""

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


# OLMo-2-1124-7B's config.json (allenai/OLMo-2-1124-7B on the Hugging Face Hub)
OLMO2_7B = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": 4096,
            "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
            "num_hidden_layers": 32, "vocab_size": 100352, "max_position_embeddings": 4096,
            "hidden_act": "silu", "attention_bias": False, "rms_norm_eps": 1e-06,
            "rope_theta": 500000, "tie_word_embeddings": False, "torch_dtype": "float32"}


def test_olmo2_full_width_norms_counted_by_hand():
    m = ModelConfig(**map_hf_config(OLMO2_7B, "olmo2.json").fields)
    assert m.qk_norm == "full" and not m.bias and m.ffn_kind == "swiglu"
    assert pm.qk_norm_params(m) == 4096 + 4096  # all 32 query heads of 128, all 32 key heads
    layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096 + 8192
    assert pm.layer_params(m) == layer
    total = 32 * layer + 2 * 100352 * 4096 + 4096  # untied embedding and head, final norm
    assert pm.total_params(m) == total == 7_298_617_344  # the model card's "7B" (7.3B)
    with_kv = m.model_copy(update={"kv_heads": 8})  # a GQA variant: key norm over 8 heads
    assert pm.qk_norm_params(with_kv) == 4096 + 1024


def test_true_still_means_per_head():
    m = ModelConfig(layers=1, hidden=1024, heads=8, seq_len=128, qk_norm=True)
    assert m.qk_norm == "head" and pm.qk_norm_params(m) == 2 * 2 * 128
    with pytest.raises(ValueError, match="qk_norm"):
        ModelConfig(layers=1, hidden=1024, heads=8, seq_len=128, qk_norm="rows")


@pytest.mark.parametrize("tp", [2, 4])
def test_full_width_norms_are_a_row_per_token_over_the_ranks_heads(tp):
    est = estimate_step(_cfg("model.qk_norm=full", "model.kv_heads=8", f"parallel.tp={tp}",
                             "parallel.dp=1", "parallel.sequence_parallel=false"))
    seq = est.config.model.seq_len
    rows = sorted((it for it in est.items if it.name == "RMSlayernorm" and it.pass_ == "fwd"
                   and it.shape["l"] == seq and it.shape["dim"] != 4096),
                  key=lambda it: it.shape["dim"])
    assert [it.shape["dim"] for it in rows] == [8 * 128 // tp, 32 * 128 // tp]
    (hidden,) = [it for it in est.items if it.name == "RMSlayernorm" and it.pass_ == "fwd"
                 and it.shape["dim"] == 4096 and it.calls > est.config.micro_batches]
    # memory-bound: the query heads' norm over 4096/tp of a row costs 1/tp of the hidden one
    assert rows[1].time_per_call_s == pytest.approx(hidden.time_per_call_s / tp, rel=0.02)


def test_without_tp_the_full_width_norms_have_the_hidden_norms_shape():
    est = estimate_step(_cfg("model.qk_norm=full", "parallel.tp=1", "parallel.dp=1"))
    per_layer = est.config.micro_batches * est.config.model.layers
    calls = sum(it.calls for it in est.items
                if it.name == "RMSlayernorm" and it.pass_ == "fwd" and it.shape["dim"] == 4096)
    # two a layer, the 32 query heads' and the 32 key heads' (4,096 wide each), the final one
    assert calls == 4 * per_layer + est.config.micro_batches
    assert not any(it.name == "RMSlayernorm" and it.shape["dim"] == 128 for it in est.items)


def test_olmo2_estimates_from_its_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(OLMO2_7B))
    notes: list[str] = []
    cfg = load_config(str(path), notes)
    assert cfg.model.qk_norm == "full"
    assert any("norms after the attention and the FFN" in n for n in notes)
    assert estimate_step(cfg).step_time_s > 0
