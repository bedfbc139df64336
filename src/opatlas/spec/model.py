"""The pydantic models of a sweep spec."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opatlas.expressions import Expression, ExpressionError
from opatlas.ops.base import DEFAULT_DTYPE  # a spec's dtype when it gives none (said on stderr)

Scalar = int | float | str | bool
MAX_RANGE_VALUES = 1_000_000
PASSES = ("fwd", "bwd", "step")


class ParamError(ValueError):
    """What is wrong with one parameter's values (the loader names the key ``params.<key>``)."""

    def __init__(self, key: str, detail: str) -> None:
        self.key, self.detail = key, detail
        super().__init__(f"parameter {key!r}: {detail}")


class ParamRange(BaseModel):
    """``start, start∘step, ...`` up to and including ``end``; ∘ is + (``add``) or × (``mul``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: int | float
    step: int | float
    end: int | float
    mode: Literal["add", "mul"] = Field(default="add", alias="operator")

    @model_validator(mode="after")
    def _check(self) -> ParamRange:
        if not all(math.isfinite(x) for x in (self.start, self.step, self.end)):
            raise ValueError("start, step and end must be finite numbers")
        if self.mode == "add" and self.step <= 0:
            raise ValueError(f"step must be > 0 for mode add, got {self.step}")
        if self.mode == "mul" and self.step <= 1:
            raise ValueError(f"step must be > 1 for mode mul, got {self.step}")
        if self.mode == "mul" and self.start <= 0:
            raise ValueError(f"start must be > 0 for mode mul, got {self.start}")
        if self.start > self.end:
            raise ValueError(f"empty range: start {self.start} > end {self.end}")
        if self.mode == "add" and (self.end - self.start) / self.step + 1 > MAX_RANGE_VALUES:
            raise ValueError(f"range has more than {MAX_RANGE_VALUES} values")
        if self.mode == "mul" and self.mul_count() > MAX_RANGE_VALUES:
            raise ValueError(f"range has more than {MAX_RANGE_VALUES} values")
        return self

    def mul_count(self) -> int:
        """How many values a ``mul`` range makes, without making them: floor(log(end/start)
        / log(step)) + 1, that estimate moved by the values themselves where float rounding
        puts it one off (``_mul_value(k)`` is exactly the value ``values()`` compares)."""
        k = max(0, math.floor(math.log(self.end / self.start) / math.log(self.step)))
        while k > 0 and self._mul_value(k) > self.end:
            k -= 1
        while self._mul_value(k + 1) <= self.end:
            k += 1
        return k + 1

    def _mul_value(self, i: int) -> int | float:
        """Value ``i`` of a ``mul`` range, as ``values()`` makes it (inf past the floats)."""
        try:
            raw = self.start * self.step ** i
        except OverflowError:
            return math.inf
        return _tidy(raw, 1e-14 * abs(raw))

    def values(self) -> list[int | float]:
        """The inclusive sequence; integers stay integers. Value ``i`` is ``start + i·step``
        (``start·step**i`` for mul), a float without its float noise: 0.1 + 2·0.1 is 0.3, as
        a list ``[0.3]`` writes it (the same vector id, and ``--where "p == 0.3"`` finds
        it), and an end hit within that noise is included."""
        out: list[int | float] = [self.start]  # as written: an int start stays an int
        for i in itertools.count(1):
            if self.mode == "add":
                raw = self.start + i * self.step
                v = _tidy(raw, max(1e-9 * abs(self.step), 1e-14 * abs(raw)))
            else:
                v = self._mul_value(i)
            if v > self.end:
                return out
            out.append(v)
        return out  # unreachable: a range is finite (its checks above)


def _tidy(value: int | float, noise: float) -> int | float:
    """A float as 12 significant digits write it where that moves it by at most ``noise``
    (float noise: 0.30000000000000004 is 0.3), else as it is (1e13 + 1 stays, 3.0**26 too);
    an int as it is."""
    if not isinstance(value, float):
        return value
    near = float(f"{value:.12g}")
    return near if abs(near - value) <= noise else value


# A list of mappings ties parameters together: each entry sets all its keys at once (e.g. one
# entry per model: dim, heads, FFN width and vocabulary), instead of crossing them.
Tied = list[dict[str, Scalar]]
ParamValues = list[Scalar] | Tied | ParamRange | Scalar


class SweepSpec(BaseModel):
    """What to run: one op, its parameters and how they vary, validity rules, suites, parts."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    op: str = Field(min_length=1)
    params: dict[str, ParamValues] = Field(min_length=1)
    fixed: dict[str, Scalar] = Field(default_factory=dict)
    dtype: str = DEFAULT_DTYPE
    passes: list[Literal["fwd", "bwd", "step"]] | None = None
    constraints: list[str] = Field(default_factory=list)
    suite_by: list[str] = Field(default_factory=list)
    max_per_suite: int | None = Field(default=None, gt=0)
    repeats: int = Field(default=10, gt=0, le=100_000)
    warmup: int = Field(default=3, ge=0, le=100_000)
    source: Literal["opatlas", "ett", "builtin"] = "opatlas"
    upstream: dict[str, Any] = Field(default_factory=dict)

    @field_validator("params", mode="before")
    @classmethod
    def _ranges_first(cls, params: Any) -> Any:
        """A mapping can only be a range: validate it as one, so a bad range reads as what is
        wrong with it rather than as a failure of every other form a value may take."""
        if not isinstance(params, Mapping):
            return params
        out = {}
        for key, val in params.items():
            if isinstance(val, Mapping):
                try:
                    val = ParamRange.model_validate(val)
                except ValidationError as exc:
                    raise ParamError(key, _range_problem(exc)) from None
            out[key] = val
        return out

    @field_validator("params")
    @classmethod
    def _non_empty_lists(cls, params: dict[str, ParamValues]) -> dict[str, ParamValues]:
        seen: dict[str, str] = {}
        for key, val in params.items():
            if not key.isidentifier():
                raise ValueError(f"parameter name {key!r} is not an identifier")
            if isinstance(val, list) and not val:
                raise ValueError(f"parameter {key!r} has an empty list of values")
            for name in _tied_names(key, val) or [key]:
                if name in seen:
                    raise ValueError(f"parameter {name!r} is set by both {seen[name]!r} and "
                                     f"{key!r}")
                seen[name] = key
        return params

    @field_validator("constraints")
    @classmethod
    def _parse_constraints(cls, exprs: list[str]) -> list[str]:
        for e in exprs:
            try:
                Expression.parse(e)
            except ExpressionError as exc:
                raise ValueError(str(exc)) from None
        return exprs

    def param_names(self) -> list[str]:
        """Every parameter the grid sets, tied ones by their own names, in spec order."""
        return [name for _, name in self.axis_names()]

    def axis_names(self) -> list[tuple[str, str]]:
        """(axis, parameter) of every parameter the grid sets, in spec order: a tied axis
        gives each of its parameters."""
        return [(key, n) for key, val in self.params.items()
                for n in _tied_names(key, val) or [key]]

    @model_validator(mode="after")
    def _suites_name_params(self) -> SweepSpec:
        known = set(self.param_names()) | set(self.fixed) | {"dtype"}
        of_op = _op_parameters(self.op)
        for key in self.suite_by:
            if key in of_op and key not in known:
                raise ParamError("suite_by", f"names {_unlisted(self.op, of_op, {key}, 'group by')}")
            if key not in known:
                raise ParamError("suite_by", f"names {key!r}, which is not a parameter (the "
                                             f"spec's are {', '.join(sorted(known))})")
        for e in self.constraints:
            unknown = Expression.parse(e).names - known
            strangers = sorted(unknown - set(of_op))
            listed = _unlisted(self.op, of_op, unknown, "constrain")
            if strangers:
                raise ParamError("constraints", f"{e!r} names unknown parameters {strangers} "
                                                f"(the spec's are {', '.join(sorted(known))})"
                                                + (f"; and {listed}" if listed else ""))
            if unknown:
                raise ParamError("constraints", f"{e!r} names {listed}")
        return self

    def axes(self) -> list[tuple[str, list[Any]]]:
        """The parameter axes in spec order, each with its expanded values (a tied axis: its
        mappings)."""
        axes: list[tuple[str, list[Any]]] = []
        for key, val in self.params.items():
            if isinstance(val, ParamRange):
                axes.append((key, list(val.values())))
            elif isinstance(val, list):
                axes.append((key, list(val)))
            else:
                axes.append((key, [val]))
        return axes

    def dtypes(self) -> list[tuple[str, Any]]:
        """(key, value) of every dtype the grid takes: ``dtype``, ``fixed.dtype`` and a
        ``dtype`` parameter's values (on a tied axis too), keys as the file writes them."""
        given: list[tuple[str, Any]] = [("dtype", self.dtype)]
        if "dtype" in self.fixed:
            given.append(("fixed.dtype", self.fixed["dtype"]))
        return given + [(f"params.{key}", v) for key, name, v in self.named_values()
                        if name == "dtype"]

    def named_values(self) -> list[tuple[str, str, Any]]:
        """(axis, parameter, value) of every value of every axis: a tied axis gives each of
        its entries' parameters."""
        out: list[tuple[str, str, Any]] = []
        for key, values in self.axes():
            for value in values:
                named = value.items() if isinstance(value, Mapping) else [(key, value)]
                out += [(key, name, v) for name, v in named]
        return out

    def grid_size(self) -> int:
        n = 1
        for _, vals in self.axes():
            n *= len(vals)
        return n


_NO_DEFAULT = object()


def _op_parameters(name: str) -> dict[str, Any]:
    """The parameters op ``name`` takes, each with its catalog default (or the value its alias
    fixes; ``_NO_DEFAULT`` for a required one); {} for an op outside the catalog (said where
    the loader checks the op)."""
    from opatlas.errors import OpatlasError
    from opatlas.ops import get_op  # local: the catalog may pull optional modules

    try:
        op, fixed = get_op(name)
    except OpatlasError:
        return {}
    return {**dict.fromkeys(op.params, _NO_DEFAULT), **op.defaults, **fixed}


def _unlisted(op: str, of_op: Mapping[str, Any], names: set[str], verb: str) -> str:
    """Those of ``names`` that op ``op`` takes, said as parameters the spec must list to
    ``verb`` them ("" if none). They are not bound to the op's defaults: ``mp`` left out is
    1, and ``dim >= mp * 256`` would be a constant over the sweep, most likely not meant."""
    taken = sorted(n for n in names if n in of_op)
    if not taken:
        return ""
    said = " and ".join(n if of_op[n] is _NO_DEFAULT else f"{n} (default {of_op[n]!r})"
                        for n in taken)
    one = len(taken) == 1
    return (f"{said}, {'a parameter' if one else 'parameters'} of op {op!r} that the spec "
            f"does not list: list {'it' if one else 'them'} under params (or fixed) to "
            f"{verb} {'it' if one else 'them'}")


def _range_problem(exc: ValidationError) -> str:
    """The first thing wrong with a range, in the words of the spec format."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return f"a range needs start, step and end; {field!r} is missing"
    if err["type"] == "extra_forbidden":
        return f"unknown range key {field!r} (a range has start, step, end and mode)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return msg if not field else f"{field}: {msg}"


def _tied_names(key: str, val: Any) -> list[str]:
    """The names a tied axis sets (all entries must set the same ones); [] for other axes."""
    if not (isinstance(val, list) and val and all(isinstance(v, dict) for v in val)):
        return []
    names = list(val[0])
    for i, entry in enumerate(val):
        if not entry:
            raise ValueError(f"parameter {key!r}: entry {i} sets nothing")
        if set(entry) != set(names):
            raise ValueError(f"parameter {key!r}: entry {i} sets {sorted(entry)}, entry 0 sets "
                             f"{sorted(names)}; tied entries must set the same parameters")
        bad = [n for n in entry if not n.isidentifier()]
        if bad:
            raise ValueError(f"parameter {key!r}: {bad[0]!r} is not an identifier")
    return names
