"""Expansion of a ``SweepSpec`` into ``Vector``s.

Order is deterministic: the odometer order of the parameters as written in the spec, the last
parameter fastest (as estimate-train-time's ``ShapeGenerator``). Grid point ``i`` (0-based, over
the whole grid) belongs to part ``k`` of ``n`` when ``i % n == k - 1``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from opatlas.errors import OpatlasError
from opatlas.expressions import Expression
from opatlas.ops import get_op
from opatlas.spec import SweepSpec

T = TypeVar("T")
DOWNSAMPLE_REASON = "downsampled"


def canonical_json(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def params_json(params: Mapping[str, Any]) -> str:
    """Parameters as JSON in their spec order (for display and export; ids use sorted keys)."""
    return json.dumps(dict(params), separators=(",", ":"), default=str)


def vector_id(op: str, params: Mapping[str, Any]) -> str:
    """sha224 of the canonical JSON (sorted keys) of ``{"op": op, **params}``."""
    return hashlib.sha224(canonical_json({"op": op, **params}).encode()).hexdigest()


@dataclass(frozen=True)
class Vector:
    """One point of a sweep: the op (as written in the spec) and its parameters."""

    op: str
    params: Mapping[str, Any]
    index: int = 0
    id: str = ""

    @classmethod
    def make(cls, op: str, params: Mapping[str, Any], index: int = 0) -> Vector:
        return cls(op=op, params=dict(params), index=index, id=vector_id(op, params))

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "op": self.op, **self.params}


@dataclass
class Expansion:
    """The valid vectors of a spec, and how many points were dropped for which reason."""

    vectors: list[Vector] = field(default_factory=list)
    invalid: Counter[str] = field(default_factory=Counter)
    invalid_vectors: list[tuple[Vector, str]] = field(default_factory=list)
    valid_override: int | None = None  # counted without materialising the vectors

    @property
    def valid(self) -> int:
        return len(self.vectors) if self.valid_override is None else self.valid_override

    @property
    def total(self) -> int:
        return self.valid + sum(self.invalid.values())

    def summary(self) -> dict[str, Any]:
        return {"total": self.total, "valid": self.valid,
                "invalid": dict(sorted(self.invalid.items()))}


def in_part(index: int, parts: int, part: int) -> bool:
    return index % parts == part - 1


def downsample(items: list[T], max_count: int) -> list[T]:
    """The reshard rule: while more than ``max_count`` remain, delete every other one
    (``del items[::2]``, i.e. keep the odd positions)."""
    out = list(items)
    while len(out) > max_count:
        del out[::2]
    return out


def _check_parts(parts: int, part: int) -> None:
    if parts < 1:
        raise OpatlasError(f"--parts must be >= 1, got {parts}")
    if not 1 <= part <= parts:
        raise OpatlasError(f"--part must be in 1..{parts}, got {part}")


def grid(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """Every grid point's parameters (spec params, then fixed, then dtype), in order."""
    axes = spec.axes()
    names = [n for n, _ in axes]
    base: dict[str, Any] = dict(spec.fixed)
    for combo in itertools.product(*(vals for _, vals in axes)):
        p: dict[str, Any] = {}
        for name, value in zip(names, combo, strict=True):
            if isinstance(value, dict):  # a tied axis: its entry sets several parameters
                p.update(value)
            else:
                p[name] = value
        p.update(base)
        p.setdefault("dtype", spec.dtype)
        yield p


_EXPANDERS: dict[str, Any] = {}


def register_expander(spec_name: str, fn: Any) -> None:
    """A built-in spec too large for the generic loop expands with its own (vectorised) code."""
    _EXPANDERS[spec_name] = fn


def expand(spec: SweepSpec, *, parts: int = 1, part: int = 1, where: str | None = None,
           keep_invalid: bool = False, materialize: bool = True) -> Expansion:
    """Expand ``spec``; ``where`` (an expression) selects a subset before validity is judged.

    Invalid vectors are counted by reason (and kept in ``invalid_vectors`` when asked);
    with ``max_per_suite`` each suite's valid vectors are downsampled by the every-other rule.
    ``materialize=False`` lets a built-in expander count without building every vector.
    """
    _check_parts(parts, part)
    if spec.source == "builtin" and spec.name in _EXPANDERS:
        return _EXPANDERS[spec.name](spec, parts=parts, part=part, where=where,
                                     keep_invalid=keep_invalid, materialize=materialize)
    op, fixed = get_op(spec.op)
    constraints = [Expression.parse(c) for c in spec.constraints]
    select = Expression.parse(where) if where else None
    out = Expansion()
    suites: dict[tuple[Any, ...], list[Vector]] = {}
    for i, raw in enumerate(grid(spec)):
        if not in_part(i, parts, part):
            continue
        if select is not None and not select(raw):
            continue
        vec = Vector.make(spec.op, raw, i)
        reason = _invalid_reason(op, fixed, raw, constraints)
        if reason is not None:
            out.invalid[reason] += 1
            if keep_invalid:
                out.invalid_vectors.append((vec, reason))
            continue
        suites.setdefault(tuple(raw.get(k) for k in spec.suite_by), []).append(vec)
    for members in suites.values():
        kept = members if spec.max_per_suite is None else downsample(members, spec.max_per_suite)
        out.vectors.extend(kept)
        if len(kept) < len(members):
            out.invalid[DOWNSAMPLE_REASON] += len(members) - len(kept)
    out.vectors.sort(key=lambda v: v.index)
    return out


def _invalid_reason(op: Any, fixed: Mapping[str, Any], raw: Mapping[str, Any],
                    constraints: Iterable[Expression]) -> str | None:
    for c in constraints:
        if not c(raw):
            return f"violates: {c.source}"
    return op.invalid_reason(op.resolve({**fixed, **raw}))
