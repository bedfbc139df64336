"""Expansion of a ``SweepSpec`` into ``Vector``s.

Order is deterministic: the odometer order of the parameters as written in the spec, the last
parameter fastest (as estimate-train-time's ``ShapeGenerator``). Grid point ``i`` (0-based, over
the whole grid) belongs to part ``k`` of ``n`` when ``i % n == k - 1``. A run reads the
expansion as a stream of bounded batches (``VectorStream``), never as one list.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from opatlas.errors import OpatlasError
from opatlas.expressions import Expression
from opatlas.ops import get_op
from opatlas.spec import SweepSpec, resolve_spec

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


@dataclass
class FilledParams:
    """The parameters of stored rows of one op, each parameter that some rows give and others
    leave out filled with the op's catalog default (:func:`fill_omitted`)."""

    params: list[dict[str, Any]]
    filled: dict[str, tuple[Any, int]] = field(default_factory=dict)  # name: (default, rows)
    lacking: dict[str, int] = field(default_factory=dict)  # no default: rows that leave it out
    incomplete: list[int] = field(default_factory=list)  # rows still lacking a parameter

    def notes(self, op: str, rows: str, lacking: str) -> list[str]:
        """One line per parameter filled in, one per parameter that could not be, saying
        what became of those ``rows`` (``lacking``: "not written", ...)."""
        out = [f"{op}: {n} {rows} leave out {k}, taken as the catalog's default {k}={v!r} "
               f"(opatlas ops)" for k, (v, n) in self.filled.items()]
        out += [f"{op}: {n} {rows} leave out {k}, which other rows give and the catalog has "
                f"no default for: {lacking}" for k, n in self.lacking.items()]
        return out


def fill_omitted(op: str, params: Iterable[Mapping[str, Any]]) -> FilledParams:
    """Rows of ``op`` as one table: a parameter a spec left out (``mp`` in one spec, ``mp:
    [2]`` in another) means the catalog's default (or the value the op's alias fixes). Done
    where rows are read, never to the stored parameters: vector ids stay as they are. A row
    left lacking (no default) is listed in ``incomplete``; ``dtype`` is not filled."""
    rows = [dict(p) for p in params]
    names = [k for k in dict.fromkeys(k for p in rows for k in p) if k != "dtype"]
    out = FilledParams(rows)
    if all(k in p for p in rows for k in names):
        return out
    try:
        cat, fixed = get_op(op)
        defaults = {**cat.defaults, **fixed}
    except OpatlasError:  # an op outside the catalog has no defaults
        defaults = {}
    for i, p in enumerate(rows):
        for k in names:
            if k in p:
                continue
            if k in defaults:
                p[k] = defaults[k]
                v, n = out.filled.get(k, (defaults[k], 0))
                out.filled[k] = (v, n + 1)
            else:
                out.lacking[k] = out.lacking.get(k, 0) + 1
                if not out.incomplete or out.incomplete[-1] != i:
                    out.incomplete.append(i)
    return out


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
    uncounted: str | None = None  # why the invalid points are not counted, where they are not

    @property
    def valid(self) -> int:
        return len(self.vectors) if self.valid_override is None else self.valid_override

    @property
    def total(self) -> int:
        return self.valid + sum(self.invalid.values())

    def summary(self) -> dict[str, Any]:
        """The counts as a dict: ``{"total": points, "valid": vectors, "invalid": {reason:
        points}}`` (reasons sorted; in a part or a selection, its points only)."""
        return {"total": self.total, "valid": self.valid,
                "invalid": dict(sorted(self.invalid.items()))}


def in_part(index: int, parts: int, part: int) -> bool:
    return index % parts == part - 1


def downsample(items: list[T], max_count: int) -> list[T]:
    """The reshard rule: while more than ``max_count`` remain, delete every other one
    (``del items[::2]``, i.e. keep the odd positions)."""
    period = 2 ** downsample_rounds(len(items), max_count)
    return list(items[period - 1::period])


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


DEFAULT_BATCH = 20_000  # grid points per batch: bounded memory, few store transactions


@dataclass
class ExpansionBatch:
    """A slice of an expansion, in grid order: its valid vectors (none when only counting),
    how many there are, and its invalid vectors with their reasons (when kept)."""

    vectors: list[Vector] = field(default_factory=list)
    invalid: list[tuple[Vector, str]] = field(default_factory=list)
    valid: int = 0

    def __len__(self) -> int:
        return self.valid + len(self.invalid)

    def extend(self, other: ExpansionBatch) -> None:
        self.vectors.extend(other.vectors)
        self.invalid.extend(other.invalid)
        self.valid += other.valid


Expander = Callable[["VectorStream"], Iterator[ExpansionBatch]]
_EXPANDERS: dict[str, Expander] = {}


def register_expander(spec_name: str, fn: Expander) -> None:
    """A built-in spec too large for the generic loop expands with its own (vectorised) code:
    ``fn(stream)`` yields the stream's batches and counts the invalid points in
    ``stream.invalid`` where it judges whole suites (``spec.suite_by``): a sweep not split in
    parts, selected (if at all) by the suite keys alone. Elsewhere it yields the valid
    vectors alone, and :attr:`VectorStream.uncounted` says so."""
    _EXPANDERS[spec_name] = fn


def own_expander(spec: SweepSpec) -> Expander | None:
    """The expander ``spec`` registered (a built-in too large for the generic loop), else None."""
    return _EXPANDERS.get(spec.name) if spec.source == "builtin" else None


class VectorStream:
    """The expansion of ``spec`` (one part, one selection) in batches of about ``batch_size``
    vectors, built as they are read: a 1M-vector sweep never sits in memory at once.

    Each iteration expands again from the start, with the same vectors in the same order.
    After a full iteration, ``valid`` and ``invalid`` hold its counts. ``materialize=False``
    counts without building the vectors; ``keep_invalid`` keeps invalid ones in the batches.
    """

    def __init__(self, spec: SweepSpec | str | Path, *, parts: int = 1, part: int = 1,
                 where: str | None = None, keep_invalid: bool = False, materialize: bool = True,
                 batch_size: int = DEFAULT_BATCH) -> None:
        _check_parts(parts, part)
        spec = as_spec(spec)
        self.spec, self.parts, self.part, self.where = spec, parts, part, where
        self.select = Expression.parse(where) if where else None  # bad input fails here
        self.keep_invalid, self.materialize = keep_invalid, materialize
        self.batch_size = max(1, batch_size)
        self.invalid: Counter[str] = Counter()
        self.valid = 0

    @property
    def uncounted(self) -> str | None:
        """Why ``invalid`` lacks the invalid points of this part and selection (None where it
        holds them all): a registered expander counts them for whole suites only."""
        if own_expander(self.spec) is None:
            return None
        if self.parts > 1:
            return (f"the built-in {self.spec.name} counts its invalid points for the whole "
                    f"sweep only: run without --parts for them")
        beyond = sorted(self.select.names - set(self.spec.suite_by)) if self.select else []
        if beyond:
            return (f"the built-in {self.spec.name} counts its invalid points only where "
                    f"--where looks at {', '.join(self.spec.suite_by)} alone (it looks at "
                    f"{', '.join(beyond)})")
        return None

    def __iter__(self) -> Iterator[ExpansionBatch]:
        self.invalid = Counter()
        self.valid = 0
        expander = own_expander(self.spec)
        pending = ExpansionBatch()
        for batch in (expander or _expand_generic)(self):
            self.valid += batch.valid
            pending.extend(batch)
            if len(pending) >= self.batch_size:
                yield pending
                pending = ExpansionBatch()
        if len(pending):
            yield pending
        if not self.invalid[DOWNSAMPLE_REASON]:
            del self.invalid[DOWNSAMPLE_REASON]


def as_spec(spec: SweepSpec | str | Path) -> SweepSpec:
    """``spec`` itself, or the spec a path (or a built-in spec's name) names
    (:func:`~opatlas.spec.resolve_spec`)."""
    if isinstance(spec, SweepSpec):
        return spec
    if isinstance(spec, str | Path):
        return resolve_spec(spec)
    raise OpatlasError(f"spec={spec!r} ({type(spec).__name__}): expected a SweepSpec "
                       f"(opatlas.spec.resolve_spec), a spec file's path or a built-in "
                       f"spec's name")


def expand(spec: SweepSpec | str | Path, *, parts: int = 1, part: int = 1, where: str | None = None,
           keep_invalid: bool = False, materialize: bool = True) -> Expansion:
    """Expand ``spec`` (a ``SweepSpec``, a spec file's path or a built-in spec's name) into
    one list; ``where`` (an expression) selects a subset before
    validity is judged. A run streams the same expansion instead (:class:`VectorStream`).

    Invalid vectors are counted by reason (and kept in ``invalid_vectors`` when asked);
    with ``max_per_suite`` each suite's valid vectors are downsampled by the every-other rule,
    over the whole sweep: a part or a selection is a subset of the downsampled sweep.
    ``materialize=False`` counts without building every vector.
    """
    stream = VectorStream(spec, parts=parts, part=part, where=where,
                          keep_invalid=keep_invalid, materialize=materialize)
    out = Expansion()
    for batch in stream:
        out.vectors.extend(batch.vectors)
        out.invalid_vectors.extend(batch.invalid)
    out.invalid = stream.invalid
    out.valid_override = None if materialize else stream.valid
    out.uncounted = stream.uncounted
    return out


def downsample_rounds(count: int, max_count: int) -> int:
    """How many every-other rounds :func:`downsample` makes on ``count`` items (each keeps
    ``n // 2``)."""
    rounds = 0
    while count > max_count:
        count //= 2
        rounds += 1
    return rounds


class SuiteThinner:
    """:func:`downsample` applied one vector at a time, knowing each suite's size up front:
    after ``r`` rounds the survivors are the positions ``p`` with ``(p + 1) % 2**r == 0``."""

    def __init__(self, sizes: Mapping[Any, int], max_count: int) -> None:
        self.period = {k: 2 ** downsample_rounds(n, max_count) for k, n in sizes.items()}
        self.seen: Counter[Any] = Counter()

    def keep(self, suite: Any) -> bool:
        self.seen[suite] += 1
        return self.seen[suite] % self.period[suite] == 0


def _expand_generic(stream: VectorStream) -> Iterator[ExpansionBatch]:
    """Grid order; invalid points counted by reason; with ``max_per_suite``, suites thinned
    over the whole grid before the part and the selection are taken (:func:`_thinned`)."""
    spec = stream.spec
    points = _judged(stream) if spec.max_per_suite is None else _thinned(stream)
    batch = ExpansionBatch()
    for i, raw, reason in points:
        if reason == DOWNSAMPLE_REASON:
            stream.invalid[DOWNSAMPLE_REASON] += 1
        elif reason is not None:
            stream.invalid[reason] += 1
            if stream.keep_invalid:
                batch.invalid.append((Vector.make(spec.op, raw, i), reason))
        else:
            batch.valid += 1
            if stream.materialize:
                batch.vectors.append(Vector.make(spec.op, raw, i))
        if len(batch) >= stream.batch_size:
            yield batch
            batch = ExpansionBatch()
    yield batch


def _judged(stream: VectorStream) -> Iterator[tuple[int, dict[str, Any], str | None]]:
    """Every grid point of the stream's part and selection: (index, parameters, why it is
    invalid or None)."""
    judge = _judge(stream.spec)
    for i, raw in enumerate(grid(stream.spec)):
        if _taken(stream, i, raw):
            yield i, raw, judge(raw)


def _thinned(stream: VectorStream) -> Iterator[tuple[int, dict[str, Any], str | None]]:
    """As :func:`_judged`, with the valid points that downsampling drops given the reason
    ``DOWNSAMPLE_REASON``. Suites are thinned over the whole grid, as the whole sweep thins
    them, and only then is the part or the selection taken: the parts together are the
    whole sweep, and a selection is a subset of it (as the built-in reshard expander does).
    A first pass judges every point once and keeps its reason as a small code."""
    spec = stream.spec
    judge = _judge(spec)
    reasons: dict[str | None, int] = {None: 0}
    codes = array("I")
    sizes: Counter[tuple[Any, ...]] = Counter()
    for raw in grid(spec):
        reason = judge(raw)
        codes.append(reasons.setdefault(reason, len(reasons)))
        if reason is None:
            sizes[_suite_key(spec, raw)] += 1
    named = {code: reason for reason, code in reasons.items()}
    thinner = SuiteThinner(sizes, spec.max_per_suite or 1)
    for i, raw in enumerate(grid(spec)):
        reason = named[codes[i]]
        if reason is None and not thinner.keep(_suite_key(spec, raw)):
            reason = DOWNSAMPLE_REASON
        if _taken(stream, i, raw):
            yield i, raw, reason


def _judge(spec: SweepSpec) -> Callable[[Mapping[str, Any]], str | None]:
    """Why a grid point of ``spec`` is invalid (None: it is valid)."""
    op, fixed = get_op(spec.op)
    constraints = [Expression.parse(c) for c in spec.constraints]
    return lambda raw: _invalid_reason(op, fixed, raw, constraints)


def _taken(stream: VectorStream, index: int, raw: Mapping[str, Any]) -> bool:
    """Whether grid point ``index`` is in the stream's part and selection."""
    if not in_part(index, stream.parts, stream.part):
        return False
    return stream.select is None or selected(stream, stream.select, raw)


def selected(stream: VectorStream, select: Expression, params: Mapping[str, Any]) -> bool:
    """Whether ``--where`` selects the point; one that divides by zero is not selected, and
    counted as a reason: the user may not have meant it."""
    chosen = select(params, on_zero=None)
    if chosen is None:
        stream.invalid[divides_by_zero(select)] += 1
    return bool(chosen)


def divides_by_zero(select: Expression) -> str:
    """The reason points are counted under where ``--where`` divides by zero."""
    return f"--where {select.source!r} divides by zero"


def _suite_key(spec: SweepSpec, raw: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(raw.get(k) for k in spec.suite_by)


def _invalid_reason(op: Any, fixed: Mapping[str, Any], raw: Mapping[str, Any],
                    constraints: Iterable[Expression]) -> str | None:
    for c in constraints:
        if not c(raw):
            return f"violates: {c.source}"
    return op.invalid_reason(op.resolve({**fixed, **raw}))
