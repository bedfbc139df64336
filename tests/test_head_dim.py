"""Attention heads whose width is not hidden / heads (Qwen3, Gemma, Megatron-LM's
--kv-channels): parameter counts against the published ones, op shapes, FLOPs and activation
memory derived by hand, and models whose heads do fit hidden unchanged."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, run_cli
from opatlas.errors import SpecError
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate import model as pm
from opatlas.estimate.config import ModelConfig
from opatlas.estimate.hf import map_hf_config
from opatlas.estimate.megatron import megatron_config
from opatlas.estimate.memory import activation_bytes_per_layer
from opatlas.ops.batch import count_columns
from opatlas.ops.registry import get_op

QWEN3_8B = json.loads((REPO / "src/opatlas/data/hf/qwen3-8b.json").read_text())
# Qwen3 technical report / model cards: (hidden, ffn, layers, heads, kv heads, tied) and the
# published total and non-embedding parameter counts, with half their last published digit;
# every size has head_dim 128
QWEN3 = {
    "0.6b": ((1024, 3072, 28, 16, 8, True), 0.6e9, (0.44e9, 0.005e9)),
    "4b": ((2560, 9728, 36, 32, 8, True), 4.0e9, (3.6e9, 0.05e9)),
    "32b": ((5120, 25600, 64, 64, 8, False), 32.8e9, (31.2e9, 0.05e9)),
}


def _qwen3(tmp_path, size: str):
    (hidden, ffn, layers, heads, kv, tied), _, _ = QWEN3[size]
    p = tmp_path / f"qwen3-{size}.json"
    p.write_text(json.dumps({**QWEN3_8B, "hidden_size": hidden, "intermediate_size": ffn,
                             "num_hidden_layers": layers, "num_attention_heads": heads,
                             "num_key_value_heads": kv, "tie_word_embeddings": tied}))
    return p


@pytest.mark.parametrize("size", list(QWEN3))
def test_qwen3_sizes_with_wide_heads_give_their_published_counts(tmp_path, size):
    m = load_config(_qwen3(tmp_path, size)).model
    _, total, (non_embedding, rounding) = QWEN3[size]
    assert m.head_dim == 128 and m.attn_width == m.heads * 128
    assert pm.total_params(m) == pytest.approx(total, abs=0.05e9)  # published to 0.1 B
    assert m.layers * pm.layer_params(m) == pytest.approx(non_embedding, abs=rounding)


def test_gemma_7b_gives_the_papers_exact_non_embedding_count():
    # Gemma Team 2024, Table 2: 7,751,248,896 non-embedding parameters; 16 heads of 256 on a
    # hidden size of 3,072, a GeGLU FFN of 24,576 (timed as SwiGLU, said so)
    gemma = {"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
             "intermediate_size": 24576, "vocab_size": 256000, "max_position_embeddings": 8192,
             "hidden_act": "gelu"}
    m = ModelConfig(**map_hf_config(gemma, "gemma-7b.json").fields)
    assert m.attn_width == 4096 != m.hidden
    assert m.layers * pm.layer_params(m) + pm.norm_params(m) == 7_751_248_896


def test_attention_weights_by_hand():
    # Qwen3-0.6B: q 1024→2048, k and v 1024→1024 (8 heads of 128), out 2048→1024
    m = ModelConfig(layers=1, hidden=1024, heads=16, kv_heads=8, head_dim=128, seq_len=4096)
    assert pm.attention_params(m) == 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024
    with_bias = m.model_copy(update={"bias": True})
    assert pm.attention_params(with_bias) - pm.attention_params(m) == 2048 + 2 * 1024 + 1024


def test_a_head_dim_equal_to_hidden_over_heads_changes_nothing():
    cfg = load_config("llama2-7b")
    same = cfg.model_copy(update={"model": cfg.model.model_copy(update={"head_dim": 128})})
    assert same.model.head_dim_shape == {}  # op shapes stay the ones the data was measured at
    a, b = estimate_step(cfg), estimate_step(same)
    assert a.step_time_s == b.step_time_s and a.memory_gib == b.memory_gib


def test_hidden_not_divisible_by_heads_needs_head_dim():
    with pytest.raises(ValueError, match=r"give model\.head_dim"):
        ModelConfig(layers=2, hidden=1000, heads=16, seq_len=128)
    m = ModelConfig(layers=2, hidden=1000, heads=16, head_dim=64, seq_len=128)
    assert m.attn_width == 1024


def test_linear_and_attention_ops_take_the_heads_width():
    shape = {"mp": 2, "b": 1, "l": 4096, "dim": 1024, "h": 16, "kv_heads": 8, "head_dim": 128}
    qkv = count_columns("linear", {**shape, "role": "qkv"}, dtype="bf16")
    assert (qkv["in_features"][0], qkv["out_features"][0]) == (1024, (2048 + 2 * 1024) / 2)
    out = count_columns("linear", {**shape, "role": "out"}, dtype="bf16")
    assert (out["in_features"][0], out["out_features"][0]) == (2048 / 2, 1024)
    # Q·Kᵀ per shard: 8 heads of (4096 × 128)·(128 × 4096)
    bmm = count_columns("bmm", shape, dtype="bf16")
    assert bmm["flops_fwd"][0] == 2.0 * 8 * 4096 * 128 * 4096
    flash = count_columns("flash_attention", shape, dtype="bf16")
    assert flash["flops_fwd"][0] == 4.0 * 8 * 4096 * 4096 * 128 * 0.5
    op, _ = get_op("flash_attention")
    params = op.resolve({"mp": 1, "b": 1, "l": 64, "dim": 1000, "h": 16, "head_dim": 64})
    assert op.invalid_reason(params) is None  # 1000 % 16 ≠ 0 is fine with a head_dim
    assert op.invalid_reason({**params, "head_dim": 0}) == "dim % h != 0"


def test_linear_shapes_without_head_dim_are_unchanged():
    for kv in (0, 8, 32):  # MHA, GQA, and kv_heads = h
        c = count_columns("linear", {"mp": 4, "b": 2, "l": 512, "dim": 4096, "h": 32,
                                     "kv_heads": kv, "role": "qkv"}, dtype="fp16")
        kv_dim = 4096 * (kv or 32) // 32
        assert c["out_features"][0] == (4096 + 2 * kv_dim) // 4


def test_activation_memory_counts_the_attention_at_its_width():
    # Korthikanti et al.: of 34·s·b·h per layer, Q, K, V and the context are 8·s·b·h
    m = ModelConfig(layers=1, hidden=1024, heads=16, head_dim=128, seq_len=4096)
    s, b, h, q, t = 4096, 2, 1024, 2048, 4
    assert activation_bytes_per_layer(m, b, t, False, "selective") == \
        pytest.approx(s * b * (10 * h + (16 * h + 8 * q) / t))
    assert activation_bytes_per_layer(m, b, t, True, "selective") == \
        pytest.approx(s * b * (26 * h + 8 * q) / t)
    assert activation_bytes_per_layer(m, b, t, False, "none", flash=False) - \
        activation_bytes_per_layer(m, b, t, False, "none") == pytest.approx(5 * 16 * s * s * b / t)


def test_model_flops_count_attention_at_the_heads_width():
    m = ModelConfig(layers=2, hidden=1024, heads=16, head_dim=128, seq_len=4096, vocab=1000)
    standard = m.model_copy(update={"head_dim": None})
    matmul_diff = 2 * (pm.active_layer_params(m) - pm.active_layer_params(standard))
    assert pm.model_flops_per_token(m) - pm.model_flops_per_token(standard) == \
        pytest.approx(6.0 * matmul_diff + 6.0 * 2 * 4096 * (2048 - 1024))


def test_megatron_kv_channels_is_the_head_dim():
    run = megatron_config("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                          "--kv-channels 128 --vocab-size 32000 --seq-length 2048 "
                          "--max-position-embeddings 2048 --micro-batch-size 1 "
                          "--global-batch-size 8", gpus=8)
    assert run.config["model"]["head_dim"] == 128


def test_an_estimate_of_qwen3_4b_from_the_command_line(tmp_path):
    path = _qwen3(tmp_path, "4b")
    r = run_cli("estimate", str(path), "--gpus", "8", "--set", "model.seq_len=4096", "--json")
    assert r.returncode == 0, r.stderr
    est = json.loads(r.stdout)
    qkv = next(i for i in est["items"] if i["name"] == "linear1")
    assert qkv["shape"]["head_dim"] == 128
    wrong = tmp_path / "bad.json"
    wrong.write_text(json.dumps({**json.loads(path.read_text()), "head_dim": 0}))
    with pytest.raises(SpecError, match="head_dim"):
        load_config(wrong)


@pytest.mark.parametrize(("attention_bias", "mlp_bias", "extra"), [
    (False, True, (2 * 8192 + 2048) * 16),             # gate, up and down biases
    (True, False, (2048 + 2 * 512 + 2048) * 16),       # q, k, v and o biases
    (True, True, (2 * 8192 + 2048 + 2048 + 2 * 512 + 2048) * 16)])
def test_llama_attention_and_mlp_biases_count_apart(attention_bias, mlp_bias, extra):
    # Llama-3.2-1B's shape: 16 layers, hidden 2048, 32 heads of 64, 8 KV heads, FFN 8192
    cfg = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
           "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": True}
    plain = ModelConfig(**map_hf_config(cfg, "1b.json").fields)
    biased = ModelConfig(**map_hf_config({**cfg, "attention_bias": attention_bias,
                                          "mlp_bias": mlp_bias}, "1b.json").fields)
    assert pm.total_params(plain) == pytest.approx(1.236e9, rel=0.001)  # Llama 3.2 1B
    assert pm.total_params(biased) - pm.total_params(plain) == extra
