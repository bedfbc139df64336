"""Parameter counts and model FLOPs of a decoder-only transformer."""

from __future__ import annotations

from opatlas.estimate.config import ModelConfig


def attention_params(m: ModelConfig) -> int:
    d, q, kv_dim = m.hidden, m.attn_width, m.kv * m.hd
    weights = d * q + 2 * d * kv_dim + q * d  # q, k, v, out
    qkv_bias = m.bias if m.qkv_bias is None else m.qkv_bias
    return weights + ((q + 2 * kv_dim) if qkv_bias else 0) + (d if m.bias else 0)


def mlp_params(m: ModelConfig) -> int:
    """One layer's FFN (all experts and the router for MoE); biases on each projection: the
    gated one's gate and up (2·f) and down (d), the plain one's up (f) and down (d)."""
    d, f = m.hidden, m.ffn_width
    gated = m.ffn_kind == "swiglu"
    one = (3 if gated else 2) * d * f
    if m.bias if m.mlp_bias is None else m.mlp_bias:
        one += (2 * f if gated else f) + d
    return one * m.experts + d * m.experts if m.experts else one


def expert_params(m: ModelConfig) -> int:
    """The experts' own weights in one layer (0 for a dense model); the router stays shared."""
    return mlp_params(m) - m.hidden * m.experts if m.experts else 0


def norm_params(m: ModelConfig) -> int:
    return (2 if m.norm == "layernorm" else 1) * m.hidden


def qk_norm_params(m: ModelConfig) -> int:
    """The query and key norms (and biases for LayerNorm): one head's width each, shared by
    all heads (``head``), or the query heads' and the key heads' whole widths (``full``)."""
    per = 2 if m.norm == "layernorm" else 1
    if m.qk_norm == "full":
        return per * (m.attn_width + m.kv * m.hd)
    return 2 * per * m.hd if m.qk_norm else 0


def layer_norm_params(m: ModelConfig) -> int:
    """Every norm weight of one layer: replicated on tensor-parallel ranks, not split."""
    return 2 * norm_params(m) + qk_norm_params(m)


def layer_params(m: ModelConfig) -> int:
    return attention_params(m) + mlp_params(m) + layer_norm_params(m)


def embedding_params(m: ModelConfig) -> int:
    return m.vocab * m.hidden + (m.seq_len * m.hidden if m.learned_positions else 0)


def head_params(m: ModelConfig) -> int:
    """Final norm, plus the output projection unless it is tied to the embedding."""
    return norm_params(m) + (0 if m.tied_embeddings else m.vocab * m.hidden)


def total_params(m: ModelConfig) -> int:
    return m.layers * layer_params(m) + embedding_params(m) + head_params(m)


def active_layer_params(m: ModelConfig) -> int:
    """Parameters one token goes through in a layer (top-k experts for MoE)."""
    if not m.experts:
        return layer_params(m)
    one = mlp_params(m.model_copy(update={"experts": 0}))
    return attention_params(m) + m.top_k * one + layer_norm_params(m)


def model_flops_per_token(m: ModelConfig) -> float:
    """Training FLOPs per token without recomputation: 6·(active weights) for the matmuls plus
    causal attention scores and values, 6·L·s·q (forward 2·L·s·q halved by causality, ×3; q
    the query heads' width, the hidden size unless ``head_dim`` says otherwise)."""
    matmul = m.layers * (active_layer_params(m) - layer_norm_params(m)) + m.vocab * m.hidden
    return 6.0 * matmul + 6.0 * m.layers * m.seq_len * m.attn_width
