"""Einsum problem specs for the data-movement bounds: GEMM, BMM, grouped BMM, convolution and
general index strings.

A tensor dimension is a sum of ``coefficient × rank`` terms (a plain rank, or a sliding window
such as the conv input width ``Wstride·P + Wdilation·R``); its extent for a tile is
``Σ c·(t_rank − 1) + 1`` (the bounding box, as Timeloop's legacy analysis uses).
"""

from __future__ import annotations

import math
import numbers
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

Dim = tuple[tuple[str, int], ...]  # ((rank, coefficient), ...)
MAX_COUNT = 2**63  # accesses are counted in int64


def whole(value: Any) -> bool:
    """An integer (Python or NumPy), not a bool: True is an int to Python, not a size."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and \
        type(value).__name__ != "bool_"


@dataclass(frozen=True)
class Tensor:
    name: str
    dims: tuple[Dim, ...]
    read_write: bool = False

    def ranks(self) -> set[str]:
        return {r for d in self.dims for r, _ in d}

    def extent(self, dim: Dim, sizes: dict[str, int]) -> int:
        return sum(c * (sizes[r] - 1) for r, c in dim) + 1

    def size(self, sizes: dict[str, int]) -> int:
        return math.prod(self.extent(d, sizes) for d in self.dims)


@dataclass(frozen=True)
class Einsum:
    """A two-level data-movement problem: ranks with sizes, tensors, word size in bytes."""

    name: str
    ranks: dict[str, int]
    tensors: tuple[Tensor, ...]
    word_bytes: int = 1
    ops_override: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for r, n in self.ranks.items():
            if not whole(n) or n < 1:
                raise ValueError(f"{self.name}: rank {r} must be an int >= 1, got {n!r} "
                                 f"({type(n).__name__})")
        if not whole(self.word_bytes) or self.word_bytes < 1:
            raise ValueError(f"{self.name}: word_bytes must be an int >= 1 (bytes per word), "
                             f"got {self.word_bytes!r} ({type(self.word_bytes).__name__})")
        known = set(self.ranks)
        for t in self.tensors:
            if not t.ranks() <= known:
                raise ValueError(f"tensor {t.name} uses unknown ranks {sorted(t.ranks() - known)}")
        if sum(t.read_write for t in self.tensors) != 1:
            raise ValueError("exactly one tensor must be read-write (the output)")
        # the mapspace counts accesses in 64-bit integers; without reuse each tensor moves at
        # most once per iteration (the output twice): beyond that, counts would wrap around
        if (len(self.tensors) + 1) * self.macs >= MAX_COUNT:
            raise ValueError(f"too large to count exactly: {self.macs:.3g} iterations, and "
                             f"accesses are counted in 64 bits (iterations x "
                             f"{len(self.tensors) + 1} must stay below 2^63)")

    @property
    def macs(self) -> int:
        return math.prod(self.ranks.values())

    @property
    def output(self) -> Tensor:
        return next(t for t in self.tensors if t.read_write)

    def tensor_size(self, name: str) -> int:
        return next(t for t in self.tensors if t.name == name).size(self.ranks)

    @property
    def total_operand_size(self) -> int:
        """Σ |T| in words: the algorithmic minimum of backing-store accesses."""
        return sum(t.size(self.ranks) for t in self.tensors)

    @property
    def inputs(self) -> int:
        """How many tensors are read only (every tensor but the output)."""
        return len(self.tensors) - 1

    @property
    def ops(self) -> int:
        """Operations for OI with first-read elision (or the given override): per iteration,
        one multiply per input beyond the first and one add into the output, less the |O|
        first adds that elision skips: inputs·MACs − |O| (2·MACs − |O| for two inputs)."""
        if self.ops_override is not None:
            return self.ops_override
        return self.inputs * self.macs - self.output.size(self.ranks)

    def with_word_bytes(self, word_bytes: int) -> Einsum:
        return Einsum(self.name, dict(self.ranks), self.tensors, word_bytes, self.ops_override)


def _d(*terms: str | tuple[str, int]) -> Dim:
    return tuple((t, 1) if isinstance(t, str) else t for t in terms)


def gemm(M: int, K: int, N: int, word_bytes: int = 1) -> Einsum:
    """A[M,K]·B[K,N] -> C[M,N]; named as the artifact's ``Conv(P=M, C=K, K=N)``."""
    return Einsum(
        f"{M}_{K}_{N}", {"M": M, "K": K, "N": N},
        (Tensor("Weights", (_d("K"), _d("N"))), Tensor("Inputs", (_d("M"), _d("K"))),
         Tensor("Outputs", (_d("M"), _d("N")), read_write=True)), word_bytes)


def bmm(B: int, M: int, K: int, N: int, word_bytes: int = 1) -> Einsum:
    return Einsum(
        f"bmm_{B}_{M}_{K}_{N}", {"B": B, "M": M, "K": K, "N": N},
        (Tensor("Weights", (_d("B"), _d("K"), _d("N"))),
         Tensor("Inputs", (_d("B"), _d("M"), _d("K"))),
         Tensor("Outputs", (_d("B"), _d("M"), _d("N")), read_write=True)), word_bytes)


def gbmm(M: int, K: int, N: int, H: int = 1, G: int = 1, word_bytes: int = 1) -> Einsum:
    """The artifact's grouped BMM template: Inputs[H,M,K], Weights[G,K,N], Outputs[H,M,N],
    dims H, G, M, K, N. Its loops run H·G·M·K·N (every head against every group's weights),
    which the artifact notes inflates the compute by G, so its OI is taken over the true
    compute of H GEMMs, 2·H·M·K·N − H·M·N (as Timeloop counts for G = 1). GQA's real grouped
    BMM, whose heads meet only their own group's weights, is :func:`gqa_bmm`."""
    true_ops = 2 * H * M * K * N - H * M * N
    return Einsum(
        f"gbmm_{M}_{K}_{N}_{H}_{G}", {"H": H, "G": G, "M": M, "K": K, "N": N},
        (Tensor("Weights", (_d("G"), _d("K"), _d("N"))),
         Tensor("Inputs", (_d("H"), _d("M"), _d("K"))),
         Tensor("Outputs", (_d("H"), _d("M"), _d("N")), read_write=True)), word_bytes,
        ops_override=true_ops if G > 1 else None)  # G = 1: the loops' own count is the same


def gqa_bmm(M: int, K: int, N: int, H: int = 1, G: int = 1, word_bytes: int = 1) -> Einsum:
    """The grouped BMM of grouped-query attention: H heads in G groups, the H/G heads of a
    group sharing that group's weights, so H·M·K·N multiply-accumulates. Dims G, Hg = H/G,
    M, K, N: Inputs[G,Hg,M,K], Weights[G,K,N], Outputs[G,Hg,M,N]. H must be a multiple of G."""
    if H % G:
        raise ValueError(f"{H} heads do not split evenly into {G} groups")
    return Einsum(
        f"gqa_bmm_{M}_{K}_{N}_{H}_{G}", {"G": G, "Hg": H // G, "M": M, "K": K, "N": N},
        (Tensor("Weights", (_d("G"), _d("K"), _d("N"))),
         Tensor("Inputs", (_d("G"), _d("Hg"), _d("M"), _d("K"))),
         Tensor("Outputs", (_d("G"), _d("Hg"), _d("M"), _d("N")), read_write=True)),
        word_bytes)


CONV_FIELDS = ("R", "S", "P", "Q", "C", "K", "N", "Wstride", "Hstride", "Wdilation", "Hdilation")


def conv(R: int = 1, S: int = 1, P: int = 1, Q: int = 1, C: int = 1, K: int = 1, N: int = 1,
         Wstride: int = 1, Hstride: int = 1, Wdilation: int = 1, Hdilation: int = 1,
         word_bytes: int = 1) -> Einsum:
    """Timeloop's ``cnn-layer``: Weights[R,S,C,K], Inputs[N,C,W,H] with W = Wstride·P +
    Wdilation·R and H = Hstride·Q + Hdilation·S, Outputs[N,K,P,Q]. Named as the artifact's
    ``Conv.to_str()``: ``R_S_P_Q_C_K_N_Wstride_Hstride_Wdilation_Hdilation``. Every field must
    be >= 1 (a zero stride or size describes no convolution)."""
    values = (R, S, P, Q, C, K, N, Wstride, Hstride, Wdilation, Hdilation)
    for f, v in zip(CONV_FIELDS, values, strict=True):  # strides and dilations included
        if not whole(v) or v < 1:
            raise ValueError(f"conv: {f} must be an int >= 1, got {v!r} ({type(v).__name__})")
    name = f"{R}_{S}_{P}_{Q}_{C}_{K}_{N}_{Wstride}_{Hstride}_{Wdilation}_{Hdilation}"
    return Einsum(
        name, {"R": R, "S": S, "P": P, "Q": Q, "C": C, "K": K, "N": N},
        (Tensor("Weights", (_d("R"), _d("S"), _d("C"), _d("K"))),
         Tensor("Inputs", (_d("N"), _d("C"), _d(("P", Wstride), ("R", Wdilation)),
                           _d(("Q", Hstride), ("S", Hdilation)))),
         Tensor("Outputs", (_d("N"), _d("K"), _d("P"), _d("Q")), read_write=True)), word_bytes)


def from_index_string(spec: str, dims: dict[str, int], word_bytes: int = 1) -> Einsum:
    """A general Einsum from ``"mk,kn->mn"``; each letter is a rank, sized by ``dims``."""
    m = re.fullmatch(r"\s*([a-zA-Z,\s]+)->\s*([a-zA-Z]+)\s*", spec)
    if not m:
        inputs, arrow, out = spec.partition("->")
        if arrow and not inputs.strip():
            raise ValueError(f"einsum {spec!r}: no input operand before '->'; a bound needs "
                             f"the inputs, e.g. 'mk,kn->mn'")
        odd = sorted({c for c in inputs + out if not (c.isascii() and c.isalpha()) and c not in
                      ", "} if arrow else set())
        raise ValueError(f"einsum {spec!r}: expected inputs '->' output, e.g. 'mk,kn->mn'"
                         + (f" (ranks are letters; {''.join(odd)!r} is not)" if odd else ""))
    inputs = [s.strip() for s in m.group(1).split(",")]
    out = m.group(2)
    if not all(inputs):
        raise ValueError(f"einsum {spec!r}: an operand is empty (two commas, or a comma at an "
                         f"end); every operand needs its ranks, e.g. 'mk,kn->mn'")
    for operand in (*inputs, out):
        if " " in operand or len(set(operand)) < len(operand):
            repeated = sorted({c for c in operand if operand.count(c) > 1 and c != " "})
            raise ValueError(f"einsum {spec!r}: operand {operand!r} "
                             + (f"repeats rank(s) {', '.join(repeated)}: diagonals and traces "
                                "are not data-movement problems this bound models"
                                if repeated else "has a space inside"))
    letters = sorted(set("".join(inputs)) | set(out), key=("".join(inputs) + out).index)
    missing = [c for c in letters if c not in dims]
    if missing:
        raise ValueError(f"einsum {spec!r}: no size for rank(s) {missing}; give --dims")
    extra = [c for c in dims if c not in letters]
    if extra:
        raise ValueError(f"einsum {spec!r}: size(s) given for {extra}, not rank(s) of the "
                         f"expression (its ranks: {''.join(letters)})")
    for c in letters:
        if not whole(dims[c]) or dims[c] < 1:
            raise ValueError(f"einsum {spec!r}: rank {c} must be an int >= 1, got "
                             f"{dims[c]!r} ({type(dims[c]).__name__})")
    if not set(out) <= set("".join(inputs)):
        raise ValueError(f"einsum {spec!r}: output ranks must appear in an input")
    tensors = [Tensor(f"In{i}" if len(inputs) > 2 else ("Inputs", "Weights")[i],
                      tuple(_d(c) for c in s)) for i, s in enumerate(inputs)]
    tensors.append(Tensor("Outputs", tuple(_d(c) for c in out), read_write=True))
    name = spec.replace(" ", "") + "_" + "_".join(f"{c}{dims[c]}" for c in letters)
    return Einsum(name, {c: int(dims[c]) for c in letters}, tuple(tensors), word_bytes)


_CALL = re.compile(r"\s*(Conv|GBMM|GEMM|BMM)\s*\((.*)\)\s*$", re.IGNORECASE)


def _int_field(text: str, field: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"conv {text!r}: {field} is {value.strip()!r}, not an integer") from None


def _conv_call_fields(text: str, args: str) -> dict[str, int]:
    """``R=3, P=16, ...`` of ``Conv(...)``: known fields only, each once."""
    fields: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in args.split(","))):
        key, eq, val = (x.strip() for x in part.partition("="))
        if not eq or key not in CONV_FIELDS:
            raise ValueError(f"conv {text!r}: {part!r} is not FIELD=VALUE with FIELD one of "
                             f"{', '.join(CONV_FIELDS)}")
        if key in fields:
            raise ValueError(f"conv {text!r}: {key} given twice")
        fields[key] = _int_field(text, key, val)
    return fields


def parse_conv(text: str, word_bytes: int = 1) -> Einsum:
    """A convolution named as the artifact does: ``Conv.to_str()`` with all 11 fields
    (``R_S_P_Q_C_K_N_Wstride_Hstride_Wdilation_Hdilation``), or ``Conv(R=.., P=.., ...)``,
    whose omitted fields are the artifact's default 1; a warning names them."""
    m = _CALL.match(text)
    if m and m.group(1).lower() == "conv":
        fields = _conv_call_fields(text, m.group(2))
        omitted = [f for f in CONV_FIELDS if f not in fields]
        if omitted:
            warnings.warn(f"conv {text!r}: {', '.join(omitted)} not given; using 1 for each "
                          "(the artifact's Conv defaults)", stacklevel=2)
        return _named_conv(text, fields, word_bytes)
    if m:
        raise ValueError(f"conv {text!r}: a {m.group(1)}(...) name is not a convolution")
    parts = text.strip().split("_")
    if len(parts) != len(CONV_FIELDS):
        raise ValueError(f"conv {text!r}: expected {len(CONV_FIELDS)} fields "
                         f"{'_'.join(CONV_FIELDS)} (e.g. 3_3_16_16_64_64_1_1_1_1_1) or "
                         f"Conv(R=.., S=.., ...); got {len(parts)} field(s)")
    return _named_conv(text, {f: _int_field(text, f, v) for f, v in zip(CONV_FIELDS, parts,
                                                                        strict=True)},
                       word_bytes)


def _named_conv(text: str, fields: dict[str, int], word_bytes: int) -> Einsum:
    try:
        return conv(**fields, word_bytes=word_bytes)
    except ValueError as exc:
        raise ValueError(f"conv {text!r}: {exc}") from None


def parse_problem(text: str, word_bytes: int = 1) -> Einsum:
    """Artifact names: ``Conv(P=16384, C=1024, K=1024)``, ``GBMM(M=.., K=.., N=.., H=.., G=..)``,
    ``3_3_16_16_64_64_1_1_1_1_1`` (``Conv.to_str``), ``gbmm_M_K_N_H_G``, or ``M_K_N``."""
    m = _CALL.match(text)
    if m and m.group(1).lower() == "conv":
        return parse_conv(text, word_bytes)
    if m:
        kind = m.group(1).lower()
        kwargs = {}
        for part in filter(None, (p.strip() for p in m.group(2).split(","))):
            key, _, val = part.partition("=")
            kwargs[key.strip()] = int(val)
        if kind == "gbmm":
            return gbmm(**kwargs, word_bytes=word_bytes)
        if kind == "bmm":
            return bmm(**kwargs, word_bytes=word_bytes)
        return gemm(**kwargs, word_bytes=word_bytes)
    parts = text.strip().split("_")
    if parts[0] == "gbmm" and len(parts) == 6:
        return gbmm(*map(int, parts[1:]), word_bytes=word_bytes)
    if len(parts) == len(CONV_FIELDS):
        return parse_conv(text, word_bytes)
    if len(parts) == 3:
        return gemm(*map(int, parts), word_bytes=word_bytes)
    raise ValueError(f"cannot read problem {text!r}")
