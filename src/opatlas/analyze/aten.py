"""Map a profiled aten op and its input shapes to an op of the catalog's vocabulary, with its
FLOPs, minimum bytes and GEMMs for one call. Unknown ops map to None (an "other" row)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from opatlas.analyze.why import Gemm, backward_gemms

DTYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "c10::Float8_e4m3fn": 1,
               "c10::Float8_e5m2": 1, "long int": 8, "int": 4, "bool": 1, "unsigned char": 1}


@dataclass
class Mapped:
    op: str  # linear, mm, bmm, baddbmm, matmul, attention, layernorm, rmsnorm, softmax, ...
    pass_: str  # fwd or bwd (an op under the autograd engine is bwd whatever its name)
    flops: float
    bytes: float
    shape: dict[str, Any]
    gemms: list[Gemm] = field(default_factory=list)
    word: int = 4  # bytes per element of its inputs


def _prod(xs: list[int]) -> int:
    return math.prod(int(x) for x in xs) if xs else 1


def _tensors(args: dict[str, Any]) -> tuple[list[list[int]], list[str]]:
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    dims = [d if isinstance(d, list) and all(isinstance(x, int) for x in d) else [] for d in dims]
    return dims, list(types) + [""] * (len(dims) - len(types))


def _word(types: list[str]) -> int:
    for t in types:
        if t in DTYPE_BYTES and t not in ("long int", "int", "bool"):
            return DTYPE_BYTES[t]
    return 4


def _gemm_row(op: str, b: int, m: int, k: int, n: int, w: int, bias: bool = False) -> Mapped:
    flops = 2.0 * b * m * k * n + (b * m * n if bias else 0)
    nbytes = float(w * b * (m * k + k * n + m * n))
    return Mapped(op, "fwd", flops, nbytes, {"batch": b, "M": m, "K": k, "N": n}, [(b, m, k, n)],
                  w)


def _matmul(op: str, a: list[int], bm: list[int], w: int) -> Mapped | None:
    if len(a) < 1 or len(bm) < 1:
        return None
    if len(bm) == 1:
        bm = [*bm, 1]
    if len(a) == 1:
        a = [1, *a]
    if len(bm) == 2:  # batch folds into M
        return _gemm_row(op, 1, _prod(a[:-1]), a[-1], bm[-1], w)
    batch = max(_prod(a[:-2]), _prod(bm[:-2]))
    return _gemm_row(op, batch, a[-2], a[-1], bm[-1], w)


def _gemm(name: str, dims: list[list[int]], w: int) -> Mapped | None:
    short = name.removeprefix("aten::")
    try:
        if short == "linear":
            x, wt = dims[0], dims[1]
            return _gemm_row("linear", 1, _prod(x[:-1]), x[-1], wt[0], w,
                             len(dims) > 2 and bool(dims[2]))
        if short == "addmm":
            return _gemm_row("addmm", 1, dims[1][0], dims[1][1], dims[2][1], w, True)
        if short == "mm":
            return _gemm_row("mm", 1, dims[0][0], dims[0][1], dims[1][1], w)
        if short == "bmm":
            return _gemm_row("bmm", dims[0][0], dims[0][1], dims[0][2], dims[1][2], w)
        if short == "baddbmm":
            return _gemm_row("baddbmm", dims[1][0], dims[1][1], dims[1][2], dims[2][2], w, True)
        if short == "matmul":
            return _matmul("matmul", dims[0], dims[1], w)
    except (IndexError, TypeError):
        return None
    return None


ATTENTION = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
             "_flash_attention_forward", "_efficient_attention_forward", "flash_attn")
# kernels' own entry points take (batch, seq, heads, head_dim); SDPA takes (batch, heads, seq, dim)
SEQ_MAJOR = ("_flash_attention", "_efficient_attention", "flash_attn")
# elementwise and row-wise ops: catalog name, FLOPs per element (fwd), tensors moved per element
ROWWISE = {"layer_norm": ("layernorm", 8), "native_layer_norm": ("layernorm", 8),
           "rms_norm": ("rmsnorm", 4), "_fused_rms_norm": ("rmsnorm", 4),
           "group_norm": ("groupnorm", 8), "softmax": ("softmax", 5), "_softmax": ("softmax", 5),
           "log_softmax": ("softmax", 5), "_log_softmax": ("softmax", 5),
           "_safe_softmax": ("softmax", 5), "gelu": ("gelu", 8), "silu": ("silu", 4),
           "relu": ("relu", 1), "embedding": ("embedding", 0), "dropout": ("dropout", 1),
           "cross_entropy_loss": ("cross_entropy", 6), "nll_loss": ("cross_entropy", 1),
           "nll_loss_nd": ("cross_entropy", 1)}


def _attention(name: str, dims: list[list[int]], w: int, backward: bool) -> Mapped | None:
    four = [d for d in dims if len(d) == 4]
    off = 1 if backward and len(four) >= 4 else 0  # backward inputs start with grad_out
    if len(four) < off + 3:
        return None
    q, k, v = four[off], four[off + 1], four[off + 2]
    if name.removeprefix("aten::").startswith(SEQ_MAJOR):  # (batch, seq, heads, head_dim)
        b, lq, h, e = q
        s = k[1]
    else:  # PyTorch's SDPA layout: (batch, heads, seq, head_dim)
        b, h, lq, e = q
        s = k[2]
    ev = v[3]
    fwd = 2.0 * b * h * lq * s * (e + ev)
    nbytes = float(w * (_prod(q) + _prod(k) + _prod(v) + b * h * lq * ev))
    shape = {"batch": b, "heads": h, "q_len": lq, "kv_len": s, "head_dim": e}
    if backward:  # the recomputed scores, then dV, dP, dQ, dK: 2.5 times the forward
        return Mapped("attention", "bwd", 2.5 * fwd, 2 * nbytes, shape, word=w)
    return Mapped("attention", "fwd", fwd, nbytes, shape, word=w)


GEMMS = {"linear", "addmm", "mm", "bmm", "baddbmm", "matmul"}


@functools.lru_cache(maxsize=4096)
def maybe_catalog(name: str) -> bool:
    """Whether an op of this name can map at all (cheap, by name only)."""
    short = name.removeprefix("aten::")
    base = short.removesuffix("_backward").removesuffix("_backward_data").removesuffix("_dense")
    return (short in GEMMS or short == "add" or any(short.startswith(a) for a in ATTENTION) or base in ROWWISE
            or "adam" in short or short.startswith("_foreach_") or short in ("sgd", "_fused_sgd_"))


def map_op(name: str, args: dict[str, Any]) -> Mapped | None:
    """The catalog op of one profiled op call, or None when it is not one of them."""
    dims, types = _tensors(args)
    w = _word(types)
    short = name.removeprefix("aten::")
    backward = short.endswith("_backward") or "backward" in short
    if any(short.startswith(a) for a in ATTENTION):
        return _attention(name, dims, w, backward)
    g = _gemm(name, dims, w)
    if g is not None:
        return g
    if "adam" in short or short.startswith("_foreach_") or short in ("sgd", "_fused_sgd_"):
        elems = sum(_prod(d) for d in dims if d)
        return Mapped("optimizer", "step", 12.0 * elems / max(1, len(dims)),
                      float(w * elems), {"tensors": len(dims), "elements": elems}, word=w)
    if short == "add" and len(dims) >= 2 and len(dims[0]) >= 2 and dims[0] == dims[1]:
        elems = _prod(dims[0])  # a residual connection: two activations in, one out
        return Mapped("residual_add", "fwd", float(elems), float(3 * w * elems),
                      {"rows": _prod(dims[0][:-1]), "width": dims[0][-1]}, word=w)
    base = short.removesuffix("_backward").removesuffix("_backward_data")
    base = base.removesuffix("_dense")
    if base in ROWWISE and dims and dims[0]:
        op, per = ROWWISE[base]
        elems = max(_prod(d) for d in dims if d)
        tensors = 3 if backward else 2
        shape = {"rows": _prod(dims[0][:-1]), "width": dims[0][-1]}
        return Mapped(op, "bwd" if backward else "fwd", float(per * elems * (2 if backward else 1)),
                      float(w * elems * tensors), shape, word=w)
    return None


def backward_of(m: Mapped) -> Mapped:
    """A GEMM called by the autograd engine is one of a backward's GEMMs: it keeps its own
    shape (each is bounded as it is) but is labelled bwd."""
    return Mapped(m.op, "bwd", m.flops, m.bytes, m.shape, m.gemms, m.word)


__all__ = ["Mapped", "backward_gemms", "backward_of", "map_op", "maybe_catalog"]
