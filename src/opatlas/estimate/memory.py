"""Memory per GPU: weights, gradients and optimizer states per ZeRO stage (the ZeRO paper's
mixed-precision Adam accounting: 2 + 2 + 12 bytes per parameter), and activations per layer
(Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models")."""

from __future__ import annotations

from dataclasses import dataclass

from opatlas.estimate.config import ModelConfig

K_ADAM = 12  # fp32 master weights, momentum, variance


def model_state_bytes(params: float, dp: int, zero: int, weight_bytes: int = 2,
                      grad_bytes: int = 2) -> dict[str, float]:
    """Bytes per GPU of weights, gradients and optimizer states for ``params`` parameters held
    by this GPU before ZeRO partitioning: stage 1 shards the optimizer states, stage 2 also the
    gradients, stage 3 also the weights (Rajbhandari et al., 2020, Fig. 1). ``grad_bytes`` 4:
    gradients accumulated in fp32 (Megatron-LM under bf16: 6 + 12/d bytes a parameter with its
    distributed optimizer). ``weight_bytes`` 4 (fp32 training): the weights are the master
    copy, so Adam keeps only its two moments."""
    shard = lambda on: dp if on else 1  # noqa: E731
    adam = K_ADAM if weight_bytes < 4 else K_ADAM - 4
    return {"weights": weight_bytes * params / shard(zero >= 3),
            "gradients": grad_bytes * params / shard(zero >= 2),
            "optimizer": adam * params / shard(zero >= 1)}


def activation_bytes_per_layer(m: ModelConfig, micro_batch: int, tp: int, sp: bool,
                               recompute: str, flash: bool = True,
                               element_bytes: int = 2) -> float:
    """Activations one layer keeps for its backward, per micro-batch, in 16-bit training:
    s·b·h·(10 + 24/t + 5·a·s/(h·t)) without sequence parallelism, s·b·h·(34/t + 5·a·s/(h·t))
    with it; selective recomputation (or flash attention) drops the 5·a·s/h attention term;
    full recomputation keeps only the layer input, 2·s·b·h (/t with SP). Of the 24/t, 8/t are
    the attention's Q, K, V and context (4 tensors of 2 bytes): 4·q + 4·k, Q and the context
    at the query heads' width q = heads · head_dim, K and V at the key/value heads' width
    k = kv_heads · head_dim (grouped-query attention; k = q = h for Korthikanti's MHA). The
    unfused core, when its scores are kept (no recomputation, no flash), keeps K and V
    repeated to every query head, so at q. 16/t are the FFN's (:func:`ffn_activation_bytes`).
    Query and key norms (``qk_norm``) keep their inputs too: 2·(q + k) more. fp32 training
    (``element_bytes`` 4) keeps every tensor at twice the bytes."""
    s, b, h, a, q = m.seq_len, micro_batch, m.hidden, m.heads, m.attn_width
    scale = element_bytes / 2
    if recompute == "full":
        return scale * 2.0 * s * b * h / (tp if sp else 1)
    attn = 0.0 if (recompute == "selective" or flash) else 5.0 * a * s / tp
    k = m.kv * m.hd
    qk = 2.0 * (q + k) if m.qk_norm else 0.0
    kv_kept = q if attn else k  # the unfused core's K and V, repeated to the query heads
    sharded = ffn_activation_bytes(m) + 4.0 * q + 4.0 * kv_kept + qk
    core = (10.0 * h + sharded) / tp if sp else 10.0 * h + sharded / tp
    return scale * s * b * (core + attn)


def ffn_activation_bytes(m: ModelConfig) -> float:
    """What one token's FFN keeps for its backward, 16-bit, before tensor parallelism: the
    activation's input and output, 2·f each for GELU (16·h at f = 4·h: Korthikanti et al.);
    SwiGLU's input is the gate and up projections, 2·(2·f), beside its output 2·f. A MoE
    layer keeps that for each of the top-k experts a token goes to, with the token's copy
    sent to each (2·h)."""
    f = m.ffn_width
    per_expert = 6.0 * f if m.ffn_kind == "swiglu" else 4.0 * f
    if not m.experts:
        return per_expert
    return m.top_k * (per_expert + 2.0 * m.hidden)


@dataclass
class Memory:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other
