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
    distributed optimizer)."""
    shard = lambda on: dp if on else 1  # noqa: E731
    return {"weights": weight_bytes * params / shard(zero >= 3),
            "gradients": grad_bytes * params / shard(zero >= 2),
            "optimizer": K_ADAM * params / shard(zero >= 1)}


def activation_bytes_per_layer(m: ModelConfig, micro_batch: int, tp: int, sp: bool,
                               recompute: str, flash: bool = True) -> float:
    """Activations one layer keeps for its backward, per micro-batch, in 16-bit training:
    s·b·h·(10 + 24/t + 5·a·s/(h·t)) without sequence parallelism, s·b·h·(34/t + 5·a·s/(h·t))
    with it; selective recomputation (or flash attention) drops the 5·a·s/h attention term;
    full recomputation keeps only the layer input, 2·s·b·h (/t with SP). Of the 24/t, 8/t are
    the attention's Q, K, V and context (4 tensors of 2 bytes): they scale with the query
    heads' width q = heads · head_dim where that differs from h. Query and key norms
    (``qk_norm``) keep their inputs too: 2·(q + k) more, k the key heads' width."""
    s, b, h, a, q = m.seq_len, micro_batch, m.hidden, m.heads, m.attn_width
    if recompute == "full":
        return 2.0 * s * b * h / (tp if sp else 1)
    attn = 0.0 if (recompute == "selective" or flash) else 5.0 * a * s / tp
    qk = 2.0 * (q + m.kv * m.hd) if m.qk_norm else 0.0
    sharded = 16.0 * h + 8.0 * q + qk  # the MLP's two 4·h-wide tensors, the attention's four
    core = (10.0 * h + sharded) / tp if sp else 10.0 * h + sharded / tp
    return s * b * (core + attn)


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
