"""The ``Op`` base class every catalog entry derives from."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from opatlas.errors import InvalidShape

# shape parameters that count something (sizes and splits): whole numbers, at least 1
SIZE_PARAMS = frozenset({"mp", "b", "h", "l", "dim", "ffn", "vocab", "kv_heads", "heads",
                         "head_dim"})
DEFAULT_DTYPE = "fp32"  # a vector's dtype when neither it nor its op gives one
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise InvalidShape(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}") from None


def I(x: Any) -> Any:  # noqa: E743 - short on purpose: used in every formula
    """An integer for a scalar (exact at any size), a float64 array for an array: formulas
    work on both, so the catalog's counts and features evaluate a whole batch of shapes at
    once. Not int64: a count multiplies several parameters, and int64 wraps around silently
    past 9.2e18 (dim=2**62 gave a negative FLOP count, then a 6 µs "prediction"); float64 is
    exact up to 2**53, rounds by one part in 10**16 beyond, and never wraps."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    return int(x)


def pick(cond: Any, a: Any, b: Any) -> Any:
    """``a if cond else b``, elementwise when any argument is an array."""
    if any(isinstance(v, np.ndarray) for v in (cond, a, b)):
        return np.where(cond, a, b)
    return a if cond else b


def opt(p: Mapping[str, Any], key: str) -> Any:
    """An optional numeric parameter, 0 when absent or None."""
    v = p.get(key)
    return 0 if v is None else I(v)


@dataclass(frozen=True)
class Rule:
    """A validity rule: ``predicate(params)`` must hold, else the vector is invalid for ``reason``."""

    reason: str
    predicate: Callable[[Mapping[str, Any]], bool]


class Op:
    """One operator. Subclasses set the class attributes and implement the counting methods;
    ops that run on PyTorch implement :meth:`build` and :meth:`forward` and inherit the rest.

    ``params`` are required shape parameters, ``defaults`` optional ones. FLOPs and bytes are
    per pass (``fwd``, ``bwd``; ``step`` for ops with a single pass such as optimizers).
    """

    name: ClassVar[str] = ""
    params: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[Mapping[str, Any]] = {}
    passes: ClassVar[tuple[str, ...]] = ("fwd", "bwd")
    rules: ClassVar[tuple[Rule, ...]] = ()
    # parameters taken from a fixed set (a linear's role): a spec giving another value is
    # refused at load, naming it, instead of every vector being counted invalid
    choices: ClassVar[Mapping[str, tuple[Any, ...]]] = {}
    accepts_extra: ClassVar[bool] = False
    description: ClassVar[str] = ""
    # what this catalog op runs where that differs from the kernels training stacks run
    # (several unfused kernels for one fused one; a loop for a grouped kernel): an estimate
    # timed from the catalog's own measurements of it says so, as it says a roofline fallback
    reference_note: ClassVar[str] = ""

    # -- parameters -------------------------------------------------------------------------
    def resolve(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults filled in; raises ``InvalidShape`` when a required parameter is missing."""
        out = {**self.defaults, **params}
        missing = [p for p in self.params if p not in out]
        if missing:
            raise InvalidShape(f"op {self.name!r} is missing parameter(s) {missing}")
        out.setdefault("dtype", DEFAULT_DTYPE)
        return out

    def invalid_reason(self, params: Mapping[str, Any]) -> str | None:
        """The reason of the first rule the (resolved) parameters break, or None if valid."""
        for rule in self.rules:
            try:
                ok = rule.predicate(params)
            except (ZeroDivisionError, TypeError, ValueError):
                ok = False
            if not ok:
                return rule.reason
        return None

    # -- analytical counts ------------------------------------------------------------------
    def flops(self, p: Mapping[str, Any]) -> dict[str, float]:
        return dict.fromkeys(self.passes, 0.0)

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        return dict.fromkeys(self.passes, 0.0)

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        """Shape -> model features (numeric). Default: the numeric parameters themselves."""
        return {k: v for k, v in p.items()
                if isinstance(v, int | float | np.ndarray) and not isinstance(v, bool)}

    # -- execution --------------------------------------------------------------------------
    def build(self, p: Mapping[str, Any], device: str) -> Any:
        """Allocate inputs for one vector on ``device``; returns the op's state."""
        raise NotImplementedError(f"op {self.name!r} cannot run on a device")

    def forward(self, state: Any) -> Any:
        raise NotImplementedError

    def prepare(self, state: Any, pass_: str) -> Any:
        """Untimed work before one timed pass (for ``bwd``: the forward that builds the graph)."""
        if pass_ == "bwd":
            out = self.forward(state)
            return out, _grad_like(out)
        return None

    def execute(self, state: Any, pass_: str, prepared: Any) -> None:
        """The timed work of one pass."""
        if pass_ == "fwd":
            self.forward(state)
        elif pass_ == "bwd":
            out, grad = prepared
            out.backward(grad)
        else:
            raise InvalidShape(f"op {self.name!r} has no pass {pass_!r}")


def _grad_like(out: Any) -> Any:
    import torch

    return torch.ones_like(out)


def zero_means_not_given(defaults: Mapping[str, Any], name: str) -> bool:
    """Whether 0 is the size ``name``'s catalog default, meaning "not given" (linear's ffn:
    4·dim; kv_heads: heads; head_dim): then 0 is a value of ``name`` in a spec, a ``--shape``
    and a table of shapes, not a size of nothing."""
    default = defaults.get(name)
    return default == 0 and not isinstance(default, bool)
