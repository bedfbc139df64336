"""The rest of the transformer catalog: embedding, rmsnorm, swiglu, rope, masked_softmax,
fillmask, attention_dropout, baddbmm, residual_add, bias_dropout_add, cross_entropy
(vocab-parallel), adam_step, grad_accumulate, moe.

Parameters follow estimate-train-time's names (mp, b, h, l, dim) plus what upstream hard-codes
(vocab, ffn width, kv heads, experts, top-k). FLOP conventions per op are in each docstring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from opatlas.ops.base import I, Op, Rule, dtype_bytes, opt, pick
from opatlas.ops.basic import (
    _ffn,
    _heads_rules,
    _Rowwise,
    _tokens,
    attention_dims,
    ffn_shape,
    hidden_shape,
    padded_vocab,
    scores_shape,
)
from opatlas.ops.registry import register_alias, register_op
from opatlas.ops.torchutil import randn, torch_dtype


@register_op
class Embedding(Op):
    """Vocab-parallel embedding lookup of b·l tokens into a (V/mp, dim) shard. fwd: no FLOPs,
    reads the rows and writes the activations; bwd: b·l·dim adds into the shard's gradient."""

    name = "embedding"
    params = ("b", "l", "dim")
    defaults = {"mp": 1, "vocab": 50257}
    description = "vocab-parallel token embedding (one TP shard of the table)"

    def shard_rows(self, p: Mapping[str, Any]) -> int:
        return padded_vocab(I(p["vocab"]), I(p["mp"])) // I(p["mp"])

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        return {"fwd": 0.0 * _tokens(p), "bwd": 1.0 * _tokens(p) * I(p["dim"])}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        t, d, e = _tokens(p), I(p["dim"]), dtype_bytes(p["dtype"])
        return {"fwd": 2.0 * e * t * d + 8 * t,
                "bwd": e * (t * d + self.shard_rows(p) * d) + 8 * t}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        return {"tokens": _tokens(p), "vocab_rows": self.shard_rows(p), "dim": I(p["dim"])}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        import torch

        rows = self.shard_rows(p)
        idx = torch.randint(0, rows, (I(p["b"]), I(p["l"])), device=device)
        return idx, randn(rows, I(p["dim"]), dtype=p["dtype"], device=device)

    def forward(self, state: Any) -> Any:
        import torch

        return torch.nn.functional.embedding(*state)


@register_op
class RmsNorm(_Rowwise):
    """RMSNorm over dim: 4 FLOPs/elem fwd (square, sum, scale by 1/rms, weight), 8 bwd."""

    name = "rmsnorm"
    params = ("b", "l", "dim")
    description = "RMSNorm over the hidden dimension"
    fwd_flops_per_elem, bwd_flops_per_elem = 4.0, 8.0

    shape2d = staticmethod(hidden_shape)

    def param_elems(self, p: Mapping[str, Any]) -> int:
        return I(p["dim"])

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        return super().build(p, device), randn(I(p["dim"]), dtype=p["dtype"], device=device)

    def forward(self, state: Any) -> Any:
        import torch

        x, w = state
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-5)


@register_op
class SwiGlu(_Rowwise):
    """SwiGLU gate on the fused up-projection (b·l, 2·ffn/mp) -> (b·l, ffn/mp): counted per
    output element, 6 FLOPs fwd (silu 4, product 1, plus 1 for the exp's add), 12 bwd."""

    name = "swiglu"
    params = ("b", "l", "dim")
    defaults = {"mp": 1, "ffn": 0}
    description = "SwiGLU activation (silu(a)·b) of one TP shard"
    rules = (Rule("ffn % mp != 0", lambda p: _ffn(p) % p["mp"] == 0),)
    fwd_flops_per_elem, bwd_flops_per_elem = 6.0, 12.0

    shape2d = staticmethod(ffn_shape)

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        n, e = r * w, dtype_bytes(p["dtype"])
        # fwd: read a and b (2n), write n.  bwd: read dy, a, b (3n), write da, db (2n)
        return {"fwd": e * 3 * n, "bwd": e * 5 * n}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        r, w = self.shape2d(p)
        return randn(r, 2 * w, dtype=p["dtype"], device=device)

    def forward(self, state: Any) -> Any:
        import torch

        a, b = state.chunk(2, dim=-1)
        return torch.nn.functional.silu(a) * b


@register_op
class Rope(Op):
    """Rotary embedding of one (l, b, h/mp, dim/h) tensor: x·cos + rotate_half(x)·sin,
    3 FLOPs/elem both passes; cos and sin tables (l, dim/h) are read once."""

    name = "rope"
    params = ("b", "h", "l", "dim")
    defaults = {"mp": 1, "head_dim": 0}
    description = "rotary position embedding of q or k (one TP shard)"
    rules = _heads_rules()

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        b, h, l, d = attention_dims(p)
        return {"fwd": 3.0 * b * h * l * d, "bwd": 3.0 * b * h * l * d}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        b, h, l, d = attention_dims(p)
        e = dtype_bytes(p["dtype"])
        return {"fwd": e * (2 * b * h * l * d + 2 * l * d), "bwd": e * (2 * b * h * l * d + 2 * l * d)}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        b, h, l, d = attention_dims(p)
        return {"l": l, "b": b, "heads": h, "head_dim": d}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        import torch

        b, h, l, d = attention_dims(p)
        x = randn(l, b, h, d, dtype=p["dtype"], device=device)
        pos = torch.arange(l, device=device, dtype=torch.float32)[:, None]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        ang = torch.cat([pos * inv, pos * inv], dim=-1)[:, None, None, :]
        dt = torch_dtype(p["dtype"])
        return x, ang.cos().to(dt), ang.sin().to(dt)

    def forward(self, state: Any) -> Any:
        import torch

        x, cos, sin = state
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def _causal_mask(l: int, device: str) -> Any:
    import torch

    return torch.triu(torch.ones(l, l, dtype=torch.bool, device=device), diagonal=1)


@register_op
class MaskedSoftmax(_Rowwise):
    """Scaled, causally masked softmax of (b, h/mp, l, l) scores (Megatron's
    ScaledUpperTriangMaskedSoftmax): 6 FLOPs/elem fwd (scale, mask, then softmax's 5 minus
    none skipped), 5 bwd (softmax backward and the scale).

    Its least traffic reads only the causal triangle, l(l+1)/2 of each matrix (what lies above
    the diagonal is masked, known without reading it: Megatron's fused kernel skips it), and
    writes the whole output: fwd reads x, bwd reads dy and y there."""

    name = "masked_softmax"
    params = ("b", "h", "l")
    defaults = {"mp": 1}
    description = "scaled causal-masked softmax (fused where PyTorch has it)"
    reference_note = ("runs the scale, the causal mask and the softmax as separate PyTorch "
                      "kernels over the whole (l, l) scores, where Megatron-LM's "
                      "ScaledUpperTriangMaskedSoftmax is one fused kernel")
    rules = (Rule("h % mp != 0", lambda p: p["h"] % p["mp"] == 0),)
    fwd_flops_per_elem, bwd_flops_per_elem = 6.0, 5.0

    shape2d = staticmethod(scores_shape)

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        rows, l = self.shape2d(p)
        whole, causal, e = rows * l, rows * (l + 1) / 2, dtype_bytes(p["dtype"])
        return {"fwd": e * (causal + whole), "bwd": e * (2 * causal + whole)}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        l = I(p["l"])
        x = randn(I(p["b"]), I(p["h"]) // I(p["mp"]), l, l, dtype=p["dtype"], device=device)
        return x, _causal_mask(l, device)

    def forward(self, state: Any) -> Any:
        import torch

        x, mask = state
        return torch.softmax((x * 0.125).masked_fill(mask, float("-inf")), dim=-1)


@register_op
class FillMask(_Rowwise):
    """``scores.masked_fill(mask, -10000)`` on (b, h/mp, l, l): no FLOPs; reads scores and the
    (l, l) boolean mask, writes scores; bwd passes the unmasked gradient through."""

    name = "fillmask"
    params = ("b", "h", "l")
    defaults = {"mp": 1, "dim": 0}
    description = "attention-mask fill of the scores (b, h/mp, l, l)"
    rules = (Rule("h % mp != 0", lambda p: p["h"] % p["mp"] == 0),)

    shape2d = staticmethod(scores_shape)

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        e, l = dtype_bytes(p["dtype"]), I(p["l"])
        return {"fwd": e * 2 * r * w + l * l, "bwd": e * 2 * r * w + l * l}

    build = MaskedSoftmax.build

    def forward(self, state: Any) -> Any:
        x, mask = state
        return x.masked_fill(mask, -10000.0)


@register_op
class AttentionDropout(_Rowwise):
    """Dropout over one shard's (b, h/mp, l, l) attention probabilities (Megatron-LM's
    ``--attention-dropout``, 0.1 by default, a kernel of its own in unfused attention).
    2 FLOPs/elem each way (keep-mask and 1/(1-p) scale; the random numbers are not counted).
    Memory: fwd reads x, writes y and a one-byte keep mask; bwd reads dy and the mask, writes
    dx, so each way moves 2 elements and one byte per probability."""

    name = "attention_dropout"
    params = ("b", "h", "l")
    defaults = {"mp": 1, "p": 0.1}
    description = "dropout over the attention probabilities (b, h/mp, l, l)"
    rules = (Rule("h % mp != 0", lambda p: p["h"] % p["mp"] == 0),
             Rule("p must be in [0, 1)", lambda p: 0 <= float(p["p"]) < 1))
    fwd_flops_per_elem, bwd_flops_per_elem = 2.0, 2.0

    shape2d = staticmethod(scores_shape)

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        moved = (2 * dtype_bytes(p["dtype"]) + 1) * r * w
        return {"fwd": moved, "bwd": moved}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        x = randn(I(p["b"]), I(p["h"]) // I(p["mp"]), I(p["l"]), I(p["l"]),
                  dtype=p["dtype"], device=device)
        return x, float(p["p"])

    def forward(self, state: Any) -> Any:
        import torch

        x, prob = state
        return torch.nn.functional.dropout(x, p=prob, training=True)


@register_op
class Baddbmm(Op):
    """Megatron's score computation ``baddbmm(empty, q, kᵀ, beta=0, alpha=1/√d)`` of one shard:
    batch b·h/mp, (l × d)·(d × l); fwd 2·B·l·d·l + B·l·l (alpha), bwd 4·B·l·d·l."""

    name = "baddbmm"
    params = ("b", "h", "l", "dim")
    defaults = {"mp": 1, "head_dim": 0}
    description = "scaled batched matmul for attention scores (Megatron style)"
    rules = _heads_rules()

    def dims(self, p: Mapping[str, Any]) -> tuple[int, int, int]:
        b, h, l, d = attention_dims(p)
        return b * h, l, d

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        bb, l, d = self.dims(p)
        return {"fwd": 2.0 * bb * l * d * l + bb * l * l, "bwd": 4.0 * bb * l * d * l}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        bb, l, d = self.dims(p)
        e = dtype_bytes(p["dtype"])
        # bwd: two kernels, dQ = dS·K and dK = dSᵀ·Q, each reading the score gradient dS
        return {"fwd": e * bb * (2 * l * d + l * l), "bwd": e * bb * (2 * l * l + 4 * l * d)}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        bb, l, d = self.dims(p)
        return {"batch": bb, "m": l, "k": d, "n": l}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        import torch

        bb, l, d = self.dims(p)
        out = torch.empty(bb, l, l, dtype=torch_dtype(p["dtype"]), device=device)
        return (out, randn(bb, l, d, dtype=p["dtype"], device=device),
                randn(bb, d, l, dtype=p["dtype"], device=device), 1.0 / math.sqrt(d))

    def forward(self, state: Any) -> Any:
        import torch

        out, q, kt, alpha = state
        return torch.baddbmm(out, q, kt, beta=0.0, alpha=alpha)


@register_op
class ResidualAdd(_Rowwise):
    """``x + residual`` on (b·l, dim): 1 FLOP/elem; the backward is a pass-through (counted as
    upstream measures it: the same add)."""

    name = "residual_add"
    params = ("b", "l", "dim")
    description = "residual addition"
    fwd_flops_per_elem, bwd_flops_per_elem = 1.0, 1.0

    shape2d = staticmethod(hidden_shape)

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        return {"fwd": 3.0 * dtype_bytes(p["dtype"]) * r * w, "bwd": 3.0 * dtype_bytes(p["dtype"]) * r * w}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        return super().build(p, device), super().build(p, device)

    def forward(self, state: Any) -> Any:
        return state[0] + state[1]


@register_op
class BiasDropoutAdd(_Rowwise):
    """Megatron-LM's residual add after the attention's and the FFN's output projection:
    ``residual + dropout(x + bias, p)`` on (b·l, dim), one fused kernel forward
    (``--bias-dropout-fusion``, on by default). fwd reads x and the residual (and the bias),
    writes the sum and, when p > 0, a one-byte keep mask. bwd is what the backward runs at
    this junction: x's gradient (dy times the mask and 1/(1−p), when p > 0), the bias's (that
    summed over the tokens) and the add where the residual's gradient meets its branch's (the
    residual add's backward, as upstream measures it). With p = 0 and no bias it is the
    residual add."""

    name = "bias_dropout_add"
    params = ("b", "l", "dim")
    defaults = {"p": 0.1, "bias": 1}
    description = "residual add of a dropped-out, biased projection output (Megatron fused)"
    rules = (Rule("p must be in [0, 1)", lambda p: 0 <= float(p["p"]) < 1),
             Rule("bias must be 0 or 1", lambda p: int(p["bias"]) in (0, 1)))

    shape2d = staticmethod(hidden_shape)

    @staticmethod
    def _parts(p: Mapping[str, Any]) -> tuple[Any, Any]:
        """(1 where there is a dropout, 1 where there is a bias): scalars or arrays."""
        return pick(np.asarray(p["p"], dtype=float) > 0, 1, 0), I(p["bias"])

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        drop, bias = self._parts(p)
        return {"fwd": (1.0 + bias + 2 * drop) * r * w, "bwd": (1.0 + 2 * drop + bias) * r * w}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        n, e = r * w, dtype_bytes(p["dtype"])
        drop, bias = self._parts(p)
        return {"fwd": (3 * e + drop) * n + bias * e * w,
                "bwd": (3 * e + drop * (2 * e + 1) + bias * e) * n + bias * e * w}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        r, w = self.shape2d(p)
        residual = randn(r, w, dtype=p["dtype"], device=device, grad=False)
        bias = randn(w, dtype=p["dtype"], device=device, grad=bool(int(p["bias"])))
        return super().build(p, device), residual, bias, float(p["p"])

    def forward(self, state: Any) -> Any:
        import torch

        x, residual, bias, prob = state
        return residual + torch.nn.functional.dropout(x + bias, p=prob, training=True)

    def execute(self, state: Any, pass_: str, prepared: Any) -> None:
        if pass_ != "bwd":
            return super().execute(state, pass_, prepared)
        import torch

        out, grad = prepared
        x, _, bias, _ = state
        wanted = [x, bias] if bias.requires_grad else [x]
        dx = torch.autograd.grad(out, wanted, grad)[0]
        _ = grad + dx  # the residual's gradient meets its branch's


@register_op
class CrossEntropy(Op):
    """Vocab-parallel cross-entropy of one shard's logits (b·l, V/mp) (the cross-shard max/sum
    all-reduces are collectives, modelled separately): 5 FLOPs per logit fwd (max, subtract,
    exp, sum, and the target pick), 3 bwd (softmax − one-hot, scaled)."""

    name = "cross_entropy"
    params = ("b", "l")
    defaults = {"mp": 1, "vocab": 50257}
    description = "vocab-parallel cross-entropy loss of one TP shard"

    def shape2d(self, p: Mapping[str, Any]) -> tuple[int, int]:
        return _tokens(p), padded_vocab(I(p["vocab"]), I(p["mp"])) // I(p["mp"])

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        return {"fwd": 5.0 * r * w, "bwd": 3.0 * r * w}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        e = dtype_bytes(p["dtype"])
        return {"fwd": e * r * w + 8 * r, "bwd": 2.0 * e * r * w + 8 * r}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        return {"tokens": r, "vocab_shard": w}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        import torch

        r, w = self.shape2d(p)
        return randn(r, w, dtype=p["dtype"], device=device), torch.randint(0, w, (r,), device=device)

    def forward(self, state: Any) -> Any:
        import torch

        logits, target = state
        return torch.nn.functional.cross_entropy(logits.float(), target)


def transformer_layer_params(dim: Any, mp: Any, ffn: Any = 0, gated: bool = False) -> Any:
    """Parameters of one GPT-style layer on one TP shard: attention 4·d² + 4·d (QKV, out, biases),
    MLP 2·d·f + f + d (3·d·f for gated), two norms 4·d (not sharded)."""
    f = pick(ffn > 0, ffn, 4 * dim)
    attn = 4 * dim * dim + 4 * dim
    mlp = (3 if gated else 2) * dim * f + f + dim
    return (attn + mlp) // mp + 4 * dim


def ett_stage_layer_params(dim: Any, mp: Any, ffn: Any = 0) -> Any:
    """One layer of estimate-train-time's stage simulator, which its optimizer samples were
    measured on: QKV with bias (d·3d/mp + 3d/mp), out, up and down projections without biases
    (d²/mp + 2·d·f/mp), two layer norms with weight and bias (4d, not sharded)."""
    f = pick(ffn > 0, ffn, 4 * dim)
    return (3 * dim * dim + 3 * dim + dim * dim + 2 * dim * f) // mp + 4 * dim


def stage_params(p: Mapping[str, Any]) -> int:
    """Parameter count of an optimizer step: ``n_params`` if given, else ``encoders`` layers of
    ``dim`` plus what the pipeline stage holds. ``layout: flat`` (ours): the first stage holds
    the vocab shard's embedding, the last the final norm and the vocab shard's head.
    ``layout: ett`` (upstream's stage simulator): its layers, the first stage the embedding
    shard, the last the final norm and a head of ``padded_vocab/mp/mp`` rows (upstream divides
    the shard by mp twice)."""
    mp, dim = I(p["mp"]), I(p["dim"])
    ett = p.get("layout") == "ett"
    layer = ett_stage_layer_params(dim, mp, opt(p, "ffn")) if ett else \
        transformer_layer_params(dim, mp, opt(p, "ffn"))
    n = I(p["encoders"]) * layer
    shard = padded_vocab(I(p.get("vocab", 50257)), mp) // mp
    if p.get("stage") == "first":
        n = n + shard * dim
    elif p.get("stage") == "last":
        n = n + (shard // mp if ett else shard) * dim + 2 * dim
    given = opt(p, "n_params")
    return pick(given > 0, given, n)


def stage_tensors(p: Mapping[str, Any]) -> Any:
    """Parameter tensors the optimizer walks (each costs a fixed overhead): one flat tensor for
    ``layout: flat`` or a given ``n_params``; upstream's stages hold 9 per layer (two norms'
    weight and bias, QKV weight and bias, three weights), +1 (embedding) first, +3 (norm,
    head) last."""
    per_stage = {"first": 1, "last": 3}.get(str(p.get("stage")), 0)
    tensors = 9 * I(p["encoders"]) + per_stage
    layered = (p.get("layout") == "ett") & (opt(p, "n_params") <= 0)
    return pick(layered, tensors, 1)


ADAM_BYTES_PER_PARAM = 28  # fp32 param, grad, m, v read; param, m, v written


@register_op
class AdamStep(Op):
    """One fused AdamW step over a parameter count (fp32 states): 12 FLOPs per parameter
    (moments, bias corrections, update, weight decay); reads param, grad, m, v and writes
    param, m, v: 7 × 4 bytes per parameter."""

    name = "adam_step"
    params = ()
    defaults = {"mp": 1, "dim": 0, "encoders": 0, "n_params": 0, "stage": "middle",
                "vocab": 50257, "ffn": 0, "layout": "flat"}
    passes = ("step",)
    description = "fused AdamW step over a stage's parameters"
    choices = {"stage": ("first", "middle", "last"), "layout": ("flat", "ett")}
    rules = (Rule("no parameters (give n_params, or dim and encoders)",
                  lambda p: bool(stage_params(p) > 0)),)

    def counted(self, p: Mapping[str, Any]) -> tuple[Any, Any]:
        """(parameters, parameter tensors) the step walks."""
        return stage_params(p), stage_tensors(p)

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        return {"step": 12.0 * self.counted(p)[0]}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        return {"step": float(ADAM_BYTES_PER_PARAM) * self.counted(p)[0]}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        n, tensors = self.counted(p)
        return {"params": n, "tensors": tensors, "params_per_tensor": n / tensors}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        import torch

        n = int(self.counted(p)[0])
        w = torch.zeros(n, dtype=torch.float32, device=device, requires_grad=True)
        w.grad = torch.randn_like(w)
        try:
            opt = torch.optim.AdamW([w], lr=1e-4, fused=True)
        except (RuntimeError, ValueError):
            opt = torch.optim.AdamW([w], lr=1e-4, foreach=True)
        return opt

    def prepare(self, state: Any, pass_: str) -> Any:
        return None

    def execute(self, state: Any, pass_: str, prepared: Any) -> None:
        state.step()


@register_op
class WholeModelAdamStep(AdamStep):
    """estimate-train-time's whole-model optimizer samples (its ``optimizer`` file): a fused
    Adam step over ``params`` parameters held in ``param_tensors`` tensors, both as upstream
    counted them for a ``num_layers`` × ``hidden_size`` model (kept as labels). Counted as
    :class:`AdamStep` is, so the hybrid model's base is the tensors' launches plus the
    memory-bound sweep over the parameters."""

    name = "optimizer"
    params = ("params", "param_tensors")
    defaults = {"num_layers": 0, "hidden_size": 0}
    description = "fused AdamW step over a whole model's counted parameters (upstream's file)"
    choices = {}
    rules = (Rule("no parameters (params must be > 0)", lambda p: bool(I(p["params"]) > 0)),
             Rule("param_tensors must be >= 1", lambda p: bool(I(p["param_tensors"]) >= 1)))

    def counted(self, p: Mapping[str, Any]) -> tuple[Any, Any]:
        return I(p["params"]), I(p["param_tensors"])


@register_op
class GradAccumulate(Op):
    """One micro-batch's weight gradients added into the gradient buffer, as a pass of its own:
    ``buffer += grad`` over ``n_params``, 1 FLOP per parameter; reads the gradient (``dtype``)
    and the buffer (``buffer_bytes`` per element: 2 for 16-bit, 4 for fp32) and writes the
    buffer. Megatron-LM runs it in a hook after every micro-batch's backward
    (``main_grad.add_(grad)``) unless the weight-gradient GEMMs accumulate into the buffer
    themselves (gradient-accumulation fusion, from 2022 on; apex ported it in NVIDIA/apex#1297)."""

    name = "grad_accumulate"
    params = ("n_params",)
    defaults = {"buffer_bytes": 4}
    passes = ("step",)
    description = "weight gradients added into the gradient buffer (unfused accumulation)"
    rules = (Rule("no parameters (n_params must be > 0)", lambda p: bool(I(p["n_params"]) > 0)),
             Rule("buffer_bytes must be 2 or 4",
                  lambda p: int(p["buffer_bytes"]) in (2, 4)),)

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        return {"step": 1.0 * I(p["n_params"])}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        per = dtype_bytes(p["dtype"]) + 2 * I(p["buffer_bytes"])
        return {"step": per * I(p["n_params"])}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        import torch

        n = int(p["n_params"])
        buffer = torch.zeros(n, dtype=torch.float32 if int(p["buffer_bytes"]) == 4
                             else torch_dtype(p["dtype"]), device=device)
        return buffer, randn(n, dtype=p["dtype"], device=device, grad=False)

    def prepare(self, state: Any, pass_: str) -> Any:
        return None

    def execute(self, state: Any, pass_: str, prepared: Any) -> None:
        buffer, grad = state
        buffer.add_(grad)


def moe_dims(p: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """(tokens, dim, experts, ffn per shard, top_k)."""
    return _tokens(p), I(p["dim"]), I(p["experts"]), _ffn(p) // I(p["mp"]), I(p["top_k"])


@register_op
class Moe(Op):
    """Top-k routed mixture of experts of one TP shard: router 2·T·d·E, experts
    2·(k·T)·(g·d·f) fwd with g = 2 matrices (GELU) or 3 (``gated``: SwiGLU); bwd twice that."""

    name = "moe"
    params = ("b", "l", "dim", "experts", "top_k")
    defaults = {"mp": 1, "ffn": 0, "gated": 0}
    description = "mixture of experts: top-k routing + grouped expert GEMMs"
    reference_note = ("runs its experts in a Python loop (one GEMM pair per expert after a "
                      "host sync), where training stacks run grouped GEMM kernels")
    rules = (Rule("top_k > experts", lambda p: p["top_k"] <= p["experts"]),
             Rule("ffn % mp != 0", lambda p: _ffn(p) % p["mp"] == 0))

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        t, d, e, f, k = moe_dims(p)
        mats = pick(I(p["gated"]) != 0, 3, 2)
        fwd = 2.0 * t * d * e + 2.0 * k * t * mats * d * f
        return {"fwd": fwd, "bwd": 2.0 * fwd}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        t, d, e, f, k = moe_dims(p)
        b = dtype_bytes(p["dtype"])
        weights = e * pick(I(p["gated"]) != 0, 3, 2) * d * f + d * e
        return {"fwd": b * (2 * t * d + weights + 2 * k * t * f),
                "bwd": b * (3 * t * d + 2 * weights + 3 * k * t * f)}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        t, d, e, f, k = moe_dims(p)
        return {"tokens": t, "dim": d, "experts": e, "ffn_shard": f, "top_k": k}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        t, d, e, f, k = moe_dims(p)
        dt = p["dtype"]
        return (randn(t, d, dtype=dt, device=device), randn(d, e, dtype=dt, device=device),
                randn(e, d, f, dtype=dt, device=device), randn(e, f, d, dtype=dt, device=device), k)

    def forward(self, state: Any) -> Any:
        import torch

        x, router, w_up, w_down, k = state
        gates = torch.softmax((x @ router).float(), dim=-1)
        weight, expert = gates.topk(k, dim=-1)
        out = torch.zeros_like(x)
        for e in range(w_up.shape[0]):
            rows, slot = (expert == e).nonzero(as_tuple=True)
            if rows.numel():
                h = torch.nn.functional.gelu(x[rows] @ w_up[e]) @ w_down[e]
                out = out.index_add(0, rows, h * weight[rows, slot, None].to(h.dtype))
        return out


# estimate-train-time names
register_alias("RMSlayernorm", "rmsnorm")
register_alias("RoPE", "rope")
register_alias("ScaledUpperTriangMaskedSoftmax", "masked_softmax")
register_alias("res_add", "residual_add")
register_alias("parallel_cross_entropy_128", "cross_entropy")
register_alias("firstStage_optimizer", "adam_step", stage="first", layout="ett")
register_alias("middleStage_optimizer", "adam_step", stage="middle", layout="ett")
register_alias("lastStage_optimizer", "adam_step", stage="last", layout="ett")
