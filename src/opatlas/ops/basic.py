"""The first catalog entries: linear, bmm, layernorm, softmax, gelu, flash_attention, noop.

Shape parameters are named as in estimate-train-time's kernel-sampling guide: ``mp`` (tensor
parallel degree), ``b`` (micro-batch), ``h`` (heads), ``l`` (sequence length), ``dim`` (hidden).
FLOP counts use 2 per multiply-add for matrix products; elementwise ops count the arithmetic of
their reference formula per element (documented per op). Minimum bytes count each tensor that
must be read or written once, at the op's dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opatlas.ops.base import I, Op, Rule, dtype_bytes, opt, pick
from opatlas.ops.registry import register_alias, register_op
from opatlas.ops.torchutil import randn

LINEAR_ROLES = ("qkv", "out", "ffn_up", "ffn_down", "vocab")


def _ffn(p: Mapping[str, Any]) -> int:
    ffn = opt(p, "ffn")
    return pick(ffn > 0, ffn, 4 * I(p["dim"]))


def _tokens(p: Mapping[str, Any]) -> int:
    return I(p["b"]) * I(p["l"])


# The (rows, width) layouts that row-wise ops share; a ``_Rowwise`` op names one as ``shape2d``.
def hidden_shape(p: Mapping[str, Any]) -> tuple[int, int]:
    """Activations of the hidden size: (b·l, dim)."""
    return _tokens(p), I(p["dim"])


def scores_shape(p: Mapping[str, Any]) -> tuple[int, int]:
    """Attention scores of one TP shard: (b·h/mp·l, l)."""
    return I(p["b"]) * I(p["h"]) // I(p["mp"]) * I(p["l"]), I(p["l"])


def ffn_shape(p: Mapping[str, Any]) -> tuple[int, int]:
    """FFN activations of one TP shard: (b·l, ffn/mp)."""
    return _tokens(p), _ffn(p) // I(p["mp"])


def padded_vocab(vocab: Any, mp: Any, multiple: int = 128) -> Any:
    """Megatron/GPT-NeoX vocabulary padding: a multiple of ``multiple·mp``."""
    unit = multiple * mp
    return -(-vocab // unit) * unit


def attention_widths(p: Mapping[str, Any]) -> tuple[int, int]:
    """(query width, key/value width) of all heads: ``h·head_dim`` and ``kv_heads·head_dim``
    where ``head_dim`` is given (Qwen3, Gemma: the heads' width need not be ``dim``), else
    ``dim`` and ``dim·kv_heads/h`` (narrower with GQA); ``dim`` for both without ``h``."""
    dim, kv, h, hd = I(p["dim"]), opt(p, "kv_heads"), opt(p, "h"), opt(p, "head_dim")
    kv = pick(kv > 0, kv, h)
    q = pick(hd > 0, h * hd, dim)
    kv_dim = pick(hd > 0, kv * hd, pick(h > 0, dim * kv // pick(h > 0, h, 1), dim))
    return q, kv_dim


def linear_dims(p: Mapping[str, Any]) -> tuple[int, int, int]:
    """(tokens, in_features, out_features) of one tensor-parallel shard of a transformer linear."""
    mp, dim, role = I(p["mp"]), I(p["dim"]), p["role"]
    tokens = I(p["b"]) * I(p["l"])
    if role == "qkv":  # q, k, v; k and v narrower with GQA (kv_heads < h)
        q, kv_dim = attention_widths(p)
        return tokens, dim, (q + 2 * kv_dim) // mp
    if role == "out":
        return tokens, attention_widths(p)[0] // mp, dim
    if role == "ffn_up":
        return tokens, dim, _ffn(p) // mp
    if role == "ffn_down":
        return tokens, _ffn(p) // mp, dim
    if role == "vocab":
        return tokens, dim, padded_vocab(I(p["vocab"]), mp) // mp
    raise ValueError(f"unknown linear role {role!r}; one of {LINEAR_ROLES}")


@register_op
class Linear(Op):
    """``y = x·Wᵀ`` for one TP shard: fwd 2·T·in·out FLOPs, bwd 4·T·in·out (dgrad + wgrad)."""

    name = "linear"
    params = ("b", "l", "dim")
    defaults = {"mp": 1, "role": "qkv", "ffn": 0, "vocab": 50257, "h": 0, "kv_heads": 0,
                "head_dim": 0}
    description = "transformer linear layer (roles qkv/out/ffn_up/ffn_down/vocab), one TP shard"
    choices = {"role": LINEAR_ROLES}
    rules = (
        Rule("role not one of " + "/".join(LINEAR_ROLES), lambda p: p["role"] in LINEAR_ROLES),
        Rule("dim % mp != 0", lambda p: p["dim"] % p["mp"] == 0),
        Rule("ffn % mp != 0", lambda p: _ffn(p) % p["mp"] == 0),
        Rule("head_dim needs h", lambda p: not p["head_dim"] or p["h"] > 0),
    )

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        t, i, o = linear_dims(p)
        return {"fwd": 2.0 * t * i * o, "bwd": 4.0 * t * i * o}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        t, i, o = linear_dims(p)
        e = dtype_bytes(p["dtype"])
        # fwd: read x, W; write y.  bwd: two kernels, dx = dy·Wᵀ (read dy, W; write dx) and
        # dW = xᵀ·dy (read x, dy; write dW): each reads dy
        return {"fwd": e * (t * i + i * o + t * o), "bwd": e * 2 * (t * i + i * o + t * o)}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        t, i, o = linear_dims(p)
        return {"tokens": t, "in_features": i, "out_features": o}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        t, i, o = linear_dims(p)
        return (randn(t, i, dtype=p["dtype"], device=device),
                randn(o, i, dtype=p["dtype"], device=device))

    def forward(self, state: Any) -> Any:
        import torch

        x, w = state
        return torch.nn.functional.linear(x, w)


def _heads_rules() -> tuple[Rule, ...]:
    return (
        Rule("h % mp != 0", lambda p: p["h"] % p["mp"] == 0),
        Rule("dim % h != 0", lambda p: p.get("head_dim", 0) > 0 or p["dim"] % p["h"] == 0),
        Rule("dim % mp != 0", lambda p: p["dim"] % p["mp"] == 0),
    )


def head_width(p: Mapping[str, Any]) -> int:
    """Width of one attention head: ``head_dim`` where given, else ``dim/h``."""
    hd = opt(p, "head_dim")
    return pick(hd > 0, hd, I(p["dim"]) // I(p["h"]))


def bmm_dims(p: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """Attention-score BMM Q·Kᵀ of one shard: (batch=b·h/mp, M=l, K=head width, N=l)."""
    return I(p["b"]) * I(p["h"]) // I(p["mp"]), I(p["l"]), head_width(p), I(p["l"])


@register_op
class Bmm(Op):
    """Batched matmul (B, M, K)·(B, K, N): fwd 2·B·M·K·N FLOPs, bwd twice that."""

    name = "bmm"
    params = ("b", "h", "l", "dim")
    defaults = {"mp": 1, "head_dim": 0}
    description = "attention-score batched matmul Q·Kᵀ per TP shard"
    rules = _heads_rules()

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        bb, m, k, n = bmm_dims(p)
        return {"fwd": 2.0 * bb * m * k * n, "bwd": 4.0 * bb * m * k * n}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        bb, m, k, n = bmm_dims(p)
        e = dtype_bytes(p["dtype"])
        # bwd: two kernels, dA = dC·Bᵀ and dB = Aᵀ·dC, each reading dC
        return {"fwd": e * bb * (m * k + k * n + m * n),
                "bwd": e * bb * 2 * (m * n + m * k + k * n)}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        bb, m, k, n = bmm_dims(p)
        return {"batch": bb, "m": m, "k": k, "n": n}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        bb, m, k, n = bmm_dims(p)
        return (randn(bb, m, k, dtype=p["dtype"], device=device),
                randn(bb, k, n, dtype=p["dtype"], device=device))

    def forward(self, state: Any) -> Any:
        import torch

        return torch.bmm(*state)


class _Rowwise(Op):
    """Shared counting for ops over ``rows × width`` elements."""

    fwd_flops_per_elem: float = 0.0
    bwd_flops_per_elem: float = 0.0

    def shape2d(self, p: Mapping[str, Any]) -> tuple[int, int]:
        raise NotImplementedError

    def param_elems(self, p: Mapping[str, Any]) -> int:
        return 0

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        return {"fwd": self.fwd_flops_per_elem * r * w, "bwd": self.bwd_flops_per_elem * r * w}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        n, e, q = r * w, dtype_bytes(p["dtype"]), self.param_elems(p)
        # fwd: read x (+params), write y.  bwd: read dy and the saved input, write dx (+dparams).
        return {"fwd": e * (2 * n + q), "bwd": e * (3 * n + 2 * q)}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        r, w = self.shape2d(p)
        return {"rows": r, "width": w}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        r, w = self.shape2d(p)
        return randn(r, w, dtype=p["dtype"], device=device)


@register_op
class LayerNorm(_Rowwise):
    """LayerNorm over ``dim``: 8 FLOPs/elem fwd (mean 1, variance 3, normalise 2, affine 2),
    14 bwd (the two row reductions and the elementwise chain of the standard backward)."""

    name = "layernorm"
    params = ("b", "l", "dim")
    description = "LayerNorm over the hidden dimension"
    fwd_flops_per_elem, bwd_flops_per_elem = 8.0, 14.0

    shape2d = staticmethod(hidden_shape)

    def param_elems(self, p: Mapping[str, Any]) -> int:
        return 2 * I(p["dim"])

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        x = super().build(p, device)
        w = randn(I(p["dim"]), dtype=p["dtype"], device=device)
        b = randn(I(p["dim"]), dtype=p["dtype"], device=device)
        return x, w, b

    def forward(self, state: Any) -> Any:
        import torch

        x, w, b = state
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


@register_op
class Softmax(_Rowwise):
    """Softmax over the last axis of (b, h/mp, l, l) scores: 5 FLOPs/elem fwd (max, subtract,
    exp, sum, divide), 4 bwd (``y·(dy − Σ dy·y)``)."""

    name = "softmax"
    params = ("b", "h", "l")
    defaults = {"mp": 1}
    description = "attention softmax over (b, h/mp, l, l)"
    rules = (Rule("h % mp != 0", lambda p: p["h"] % p["mp"] == 0),)
    fwd_flops_per_elem, bwd_flops_per_elem = 5.0, 4.0

    shape2d = staticmethod(scores_shape)

    def forward(self, state: Any) -> Any:
        import torch

        return torch.softmax(state, dim=-1)


@register_op
class Gelu(_Rowwise):
    """GELU (tanh form) on the FFN activation (b·l, ffn/mp): 8 FLOPs/elem fwd
    (x³, 2 mul-adds, tanh, 1+, 2 muls), 13 bwd (the derivative of the same formula, times dy)."""

    name = "gelu"
    params = ("b", "l", "dim")
    defaults = {"mp": 1, "ffn": 0}
    description = "GELU on the FFN activation of one TP shard"
    rules = (Rule("ffn % mp != 0", lambda p: _ffn(p) % p["mp"] == 0),)
    fwd_flops_per_elem, bwd_flops_per_elem = 8.0, 13.0

    shape2d = staticmethod(ffn_shape)

    def forward(self, state: Any) -> Any:
        import torch

        return torch.nn.functional.gelu(state, approximate="tanh")


def attention_dims(p: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(batch b, heads per shard h/mp, sequence l, head width: head_dim or dim/h)."""
    return I(p["b"]), I(p["h"]) // I(p["mp"]), I(p["l"]), head_width(p)


def kv_heads(p: Mapping[str, Any]) -> int:
    """Key/value heads per shard (GQA/MQA when fewer than the query heads)."""
    kv = opt(p, "kv_heads")
    return pick(kv > 0, kv, I(p["h"])) // I(p["mp"])


@register_op
class FlashAttention(Op):
    """Fused attention (PyTorch SDPA; GQA when ``kv_heads`` < ``h``) of one TP shard.
    FLOPs: 4·b·h·l²·d fwd (QKᵀ and PV), halved when causal; bwd 2.5× fwd (five matmuls, QKᵀ
    recomputed). Bytes: q and o (h heads) and k, v (kv heads) once fwd; bwd reads q, k, v, o, do
    and writes dq, dk, dv."""

    name = "flash_attention"
    params = ("b", "h", "l", "dim")
    defaults = {"mp": 1, "causal": 1, "kv_heads": 0, "head_dim": 0, "impl": "auto"}
    description = "fused scaled-dot-product attention, MHA or GQA (flash backend where available)"
    choices = {"impl": ("auto", "sdpa", "flash_attn")}
    rules = (*_heads_rules(),
             Rule("h % kv_heads != 0", lambda p: p["h"] % (p["kv_heads"] or p["h"]) == 0),
             Rule("kv_heads % mp != 0", lambda p: (p["kv_heads"] or p["h"]) % p["mp"] == 0))

    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        b, h, l, d = attention_dims(p)
        f = 4.0 * b * h * l * l * d * pick(I(p["causal"]) != 0, 0.5, 1.0)
        return {"fwd": f, "bwd": 2.5 * f}

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        b, h, l, d = attention_dims(p)
        e, q, kv = dtype_bytes(p["dtype"]), b * h * l * d, b * kv_heads(p) * l * d
        return {"fwd": e * (2 * q + 2 * kv), "bwd": e * (4 * q + 4 * kv)}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        b, h, l, d = attention_dims(p)
        return {"b": b, "heads": h, "kv_heads": kv_heads(p), "l": l, "head_dim": d}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        """``impl``: ``sdpa`` (PyTorch, flash backend where it applies), ``flash_attn`` (the
        flash-attn package, (b, l, h, d) layout), or ``auto`` (flash_attn when importable on
        CUDA in fp16/bf16)."""
        b, h, l, d = attention_dims(p)
        kv = kv_heads(p)
        use_fa = p["impl"] == "flash_attn" or (
            p["impl"] == "auto" and device.startswith("cuda") and p["dtype"] in ("fp16", "bf16")
            and flash_attn_func() is not None)
        shape = (lambda n: (b, l, n, d)) if use_fa else (lambda n: (b, n, l, d))
        return (randn(*shape(h), dtype=p["dtype"], device=device),
                randn(*shape(kv), dtype=p["dtype"], device=device),
                randn(*shape(kv), dtype=p["dtype"], device=device), bool(p["causal"]), use_fa)

    def forward(self, state: Any) -> Any:
        import torch

        q, k, v, causal, use_fa = state
        if use_fa:
            return flash_attn_func()(q, k, v, causal=causal)
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])


def flash_attn_func() -> Any:
    """``flash_attn.flash_attn_func`` when the package imports, else None."""
    try:
        from flash_attn import flash_attn_func as fn
    except ImportError:
        return None
    return fn


@register_op
class Noop(Op):
    """Does nothing; measures the runner's own overhead. Takes any parameters."""

    name = "noop"
    params = ()
    accepts_extra = True
    description = "no work at all (runner-overhead benchmark)"

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        return None

    def prepare(self, state: Any, pass_: str) -> Any:
        return None

    def execute(self, state: Any, pass_: str, prepared: Any) -> None:
        return None


# estimate-train-time kernel names -> opatlas ops (their sampling YAMLs load unchanged)
register_alias("linear1", "linear", role="qkv")
register_alias("linear2", "linear", role="out")
register_alias("linear3", "linear", role="ffn_up")
register_alias("linear4", "linear", role="ffn_down")
register_alias("linear_final", "linear", role="vocab")
register_alias("flash_atten", "flash_attention")
