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
# c10::ScalarType codes as the profiler records a dtype argument ("Concrete Inputs"), and the
# bytes of one element: 5 half, 6 float, 7 double, 15 bfloat16
SCALAR_TYPES = {"5": ("fp16", 2), "6": ("fp32", 4), "7": ("fp64", 8), "15": ("bf16", 2)}
TYPE_NAMES = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp64"}
# ops whose third argument is an output dtype (softmax(x, dim, dtype)): under autocast the
# fp32 policy passes float, so a bf16 input gives an fp32 output
DTYPE_ARG = {"softmax": 2, "log_softmax": 2}


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


def _lists(args: dict[str, Any]) -> list[list[list[int]]]:
    """The TensorList arguments (``Input type`` "TensorList"), each the dims of its tensors;
    an empty list (an optional list not given) stays, so positions keep their meaning."""
    dims = args.get("Input Dims") or []
    types = list(args.get("Input type") or []) + [""] * len(dims)
    return [[t for t in d if isinstance(t, list) and all(isinstance(x, int) for x in t)]
            for d, kind in zip(dims, types, strict=False)
            if kind == "TensorList" and isinstance(d, list)]


def _concrete(args: dict[str, Any], i: int) -> str:
    """The ``i``-th of the event's "Concrete Inputs" (scalars the profiler recorded), or ""."""
    values = args.get("Concrete Inputs") or []
    return str(values[i]).strip() if 0 <= i < len(values) else ""


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
    batch_a, batch_b = a[:-2], bm[:-2]
    try:
        batch = _prod(_broadcast(batch_a, batch_b))
    except ValueError:
        return None
    row = _gemm_row(op, batch, a[-2], a[-1], bm[-1], w)
    if batch_a == batch_b:
        return row
    # a broadcast operand is read once, not once per batch; its shape tells this row from a
    # call of the same GEMM whose operands are whole ([128,64]@[4,64,32] vs [4,128,64]@...)
    row.bytes = float(w * (_prod(a) + _prod(bm) + batch * a[-2] * bm[-1]))
    row.shape |= {"A": list(a), "B": list(bm)}
    return row


def _broadcast(x: list[int], y: list[int]) -> list[int]:
    """NumPy/PyTorch broadcasting of two batch shapes (aligned at the right)."""
    n = max(len(x), len(y))
    x, y = [1] * (n - len(x)) + list(x), [1] * (n - len(y)) + list(y)
    if any(i != j and 1 not in (i, j) for i, j in zip(x, y, strict=True)):
        raise ValueError(f"batch dims {x} and {y} do not broadcast")
    return [max(i, j) if 0 not in (i, j) else 0 for i, j in zip(x, y, strict=True)]


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


# where each attention op takes its causal flag (its schema's is_causal, causal or, for the
# memory-efficient kernels, custom_mask_type: 1 and 2 are causal masks); a call whose flag the
# profiler recorded ("Concrete Inputs") as set does half the score matrix's work
CAUSAL_ARG = {"scaled_dot_product_attention": 5, "_scaled_dot_product_flash_attention": 4,
              "_scaled_dot_product_flash_attention_for_cpu": 4,
              "_scaled_dot_product_efficient_attention": 6,
              "_scaled_dot_product_cudnn_attention": 6, "_flash_attention_forward": 8,
              "_efficient_attention_forward": 9,
              "_scaled_dot_product_flash_attention_backward": 11,
              "_scaled_dot_product_flash_attention_for_cpu_backward": 7,
              "_scaled_dot_product_efficient_attention_backward": 11,
              "_scaled_dot_product_cudnn_attention_backward": 14,
              "_flash_attention_backward": 11, "_efficient_attention_backward": 14,
              "flash_attn::_flash_attn_forward": 5, "flash_attn::_flash_attn_backward": 11}
CAUSAL_VALUES = ("True", "1", "2")
# the share of the scores a causal mask keeps: the op catalog's rule (flash_attention's FLOPs
# are "halved when causal", as a config counts them)
CAUSAL_SHARE = 0.5


def is_causal(name: str, args: dict[str, Any]) -> bool:
    """Whether the profiled attention call ran with a causal mask, by its recorded flag."""
    i = CAUSAL_ARG.get(name.removeprefix("aten::"))
    return i is not None and _concrete(args, i) in CAUSAL_VALUES


def _attention(name: str, dims: list[list[int]], w: int, backward: bool,
               causal: bool = False) -> Mapped | None:
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
    fwd = 2.0 * b * h * lq * s * (e + ev) * (CAUSAL_SHARE if causal else 1.0)
    nbytes = float(w * (_prod(q) + _prod(k) + _prod(v) + b * h * lq * ev))
    shape = {"batch": b, "heads": h, "q_len": lq, "kv_len": s, "head_dim": e,
             **({"causal": True} if causal else {})}
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
        return _attention(name, dims, w, backward, is_causal(name, args))
    g = _gemm(name, dims, w)
    if g is not None:
        return g
    if "adam" in short or short.startswith("_foreach_") or short in ("sgd", "_fused_sgd_"):
        return _optimizer(short, _lists(args), dims, w)
    if short == "embedding":
        return _embedding(dims, types, w)
    if short == "dropout" and not _drops(args):
        return None  # eval mode or p=0: the input is returned as it is, no kernel runs
    if short == "add" and len(dims) >= 2 and len(dims[0]) >= 2 and dims[0] == dims[1]:
        elems = _prod(dims[0])  # a residual connection: two activations in, one out
        return Mapped("residual_add", "fwd", float(elems), float(3 * w * elems),
                      {"rows": _prod(dims[0][:-1]), "width": dims[0][-1]}, word=w)
    base = short.removesuffix("_backward").removesuffix("_backward_data")
    base = base.removesuffix("_dense")
    if base == "nll_loss" and backward:
        return _nll_loss_backward(dims, types, w)
    if base in ROWWISE and dims and dims[0]:
        op, per = ROWWISE[base]
        elems = max(_prod(d) for d in dims if d)
        shape = {"rows": _prod(dims[0][:-1]), "width": dims[0][-1]}
        if backward:
            return Mapped(op, "bwd", float(2 * per * elems), float(3 * w * elems), shape, word=w)
        out = _out_word(short, args, w)
        return Mapped(op, "fwd", float(per * elems), float((w + out) * elems), shape, word=w)
    return None


def _out_word(short: str, args: dict[str, Any], w: int) -> int:
    """Bytes per output element: the input's, or those of the dtype argument an op such as
    softmax(x, dim, dtype) was given (autocast's fp32 policy: bf16 in, fp32 out)."""
    i = DTYPE_ARG.get(short)
    code = _concrete(args, i) if i is not None else ""
    return SCALAR_TYPES[code][1] if code in SCALAR_TYPES else w


def _nll_loss_backward(dims: list[list[int]], types: list[str], w: int) -> Mapped | None:
    """nll_loss_backward(grad_out, self, target, ...): the gradient of the (rows, classes)
    input is written whole (zeros but at each row's target) and the targets read; its first
    input, the loss's gradient, is a 0-d tensor."""
    if len(dims) < 3 or len(dims[1]) < 1:
        return None
    x, target = dims[1], dims[2]
    rows = _prod(target) if target else 1
    nbytes = w * _prod(x) + DTYPE_BYTES.get(types[2], 8) * rows
    return Mapped("cross_entropy", "bwd", float(rows), float(nbytes),
                  {"rows": _prod(x[:-1]) if len(x) > 1 else 1, "width": x[-1]}, word=w)


def cast_op(args: dict[str, Any], fallback_word: int) -> tuple[Mapped, bool]:
    """An autocast cast, ``aten::to(x, dtype, ...)``: no FLOPs, the tensor read in its type
    and written in the dtype argument's (or in ``fallback_word`` bytes, the type the op it
    casts for ran with, where the dtype was not recorded). The bool says whether the target
    dtype was recorded."""
    dims, types = _tensors(args)
    elems = _prod(dims[0]) if dims and dims[0] else 0
    src = DTYPE_BYTES.get(types[0], 4) if types else 4
    code = _concrete(args, 1)
    name, dst = SCALAR_TYPES.get(code, (None, fallback_word))
    shape = {"elements": elems, "from": TYPE_NAMES.get(types[0] if types else "", "?"),
             "to": name or f"{dst}-byte"}
    return Mapped("cast", "fwd", 0.0, float((src + dst) * elems), shape, word=dst), code in SCALAR_TYPES


# per element, an Adam(W) step's FLOPs and the tensors it moves, as the op catalog's adam_step
# counts them: 12 FLOPs (moments, bias corrections, update, weight decay); param, grad, m, v
# read and param, m, v written (AMSGrad: max_exp_avg_sq read and written as well)
ADAM_FLOPS, ADAM_TENSORS = 12.0, 7
# SGD: p -= lr·g (2 FLOPs; param and grad read, param written); with momentum buffers
# buf = μ·buf + g first (2 more; the buffer read and written)
SGD_FLOPS, SGD_TENSORS = 2.0, 3
# a _foreach_ op is one element-wise op over its lists: FLOPs per element of the first list
# (1 unless named here) ...
FOREACH_FLOPS = {"addcmul": 3.0, "addcdiv": 3.0, "lerp": 3.0, "norm": 2.0, "zero": 0.0,
                 "copy": 0.0}
# ... reading each list once and writing one list, but for these
FOREACH_NO_READ = {"zero", "copy"}  # the list they overwrite is not read
FOREACH_NO_WRITE = {"norm"}  # one scalar per tensor out
# a TensorList's element type is not recorded (its "Input type" is "TensorList"): its words
# are taken as 4 bytes, fp32, as optimizer states and master weights are
LIST_WORD = 4


def _optimizer(short: str, lists: list[list[list[int]]], dims: list[list[int]], w: int
               ) -> Mapped:
    """An optimizer step (or one of its _foreach_ ops) over its parameters: the first
    TensorList's tensors (the params), or the flat tensor arguments of an op without lists."""
    params = lists[0] if lists else [d for d in dims if d]
    word = LIST_WORD if lists else w
    elems = sum(_prod(d) for d in params)

    def given(i: int) -> bool:  # an optional list (AMSGrad's, momentum's) that holds tensors
        return len(lists) > i and bool(lists[i])

    if "adam" in short:
        per, tensors = ADAM_FLOPS, ADAM_TENSORS + (2 if given(4) else 0)
    elif "sgd" in short:
        per, tensors = SGD_FLOPS + (2 if given(2) else 0), SGD_TENSORS + (2 if given(2) else 0)
    else:
        base = short.removeprefix("_foreach_").rstrip("_")
        per = FOREACH_FLOPS.get(base, 1.0)
        tensors = (max(len(lists), 1) - (base in FOREACH_NO_READ)
                   + (base not in FOREACH_NO_WRITE) - _same_list_twice(base, lists))
    return Mapped("optimizer", "step", per * elems, float(tensors * word * elems),
                  {"tensors": len(params), "elements": elems}, word=word)


def _same_list_twice(base: str, lists: list[list[list[int]]]) -> int:
    """1 when an addcmul multiplies a list by itself, read once: AdamW's
    ``_foreach_addcmul_(exp_avg_sq, grads, grads)``. A Chrome trace records neither addresses
    nor ids of a TensorList's tensors, so the two factor lists are taken as the same list when
    their shapes are equal, as in that call (addcmul of two different lists of one shape is
    rare outside it)."""
    return int(base == "addcmul" and len(lists) >= 3 and bool(lists[1]) and lists[1] == lists[2])


def _embedding(dims: list[list[int]], types: list[str], w: int) -> Mapped | None:
    """A lookup of ids in a (vocab, width) table: the looked-up rows read and written, the ids
    read; the rest of the table is not touched."""
    if len(dims) < 2 or len(dims[0]) != 2:
        return None
    ids, width = _prod(dims[1]), dims[0][1]
    id_word = DTYPE_BYTES.get(types[1], 8)
    return Mapped("embedding", "fwd", 0.0, float(2 * ids * width * w + ids * id_word),
                  {"ids": ids, "width": width}, word=w)


def _drops(args: dict[str, Any]) -> bool:
    """Whether aten::dropout(input, p, train) dropped anything: False when the profiler
    recorded train=False (eval mode) or p=0, for then it returns its input untouched."""
    p, train = _concrete(args, 1), _concrete(args, 2)
    try:
        zero = float(p) == 0.0
    except ValueError:
        zero = False  # not recorded: taken as a real dropout
    return train != "False" and not zero


def backward_of(m: Mapped) -> Mapped:
    """A GEMM called by the autograd engine is one of a backward's GEMMs: it keeps its own
    shape (each is bounded as it is) but is labelled bwd."""
    return Mapped(m.op, "bwd", m.flops, m.bytes, m.shape, m.gemms, m.word)


__all__ = ["Mapped", "backward_gemms", "backward_of", "cast_op", "map_op", "maybe_catalog"]
