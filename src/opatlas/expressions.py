"""Safe boolean/arithmetic expressions over vector parameters (``dim % mp == 0``, ``--where``).

Only literals, parameter names, arithmetic, comparisons, ``and``/``or``/``not``, ``in``, and
a few pure functions are allowed; anything else (attribute access, calls to other names,
lambdas, comprehensions) is rejected at parse time with a clear message.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opatlas.errors import OpatlasError

_ALLOWED_NODES: tuple[type, ...] = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn,
    ast.Name, ast.Load, ast.Constant, ast.Tuple, ast.List, ast.Call, ast.IfExp, ast.Subscript,
    ast.Slice,
)
def _grid(part: int) -> Any:
    def get(grid: str) -> int:
        return int(str(grid).lower().split("x")[part])
    return get


_FUNCTIONS: dict[str, Any] = {
    "min": min, "max": max, "abs": abs, "ceil": math.ceil, "floor": math.floor,
    "log2": math.log2, "int": int,
    # core grids written "XxY": grid_x("2x3") == 2, grid_y("2x3") == 3 (the seed's -x / -y)
    "grid_x": _grid(0), "grid_y": _grid(1),
}


MAX_EXPONENT = 1024  # beyond it a power of an integer takes minutes and means nothing here


def _pow(base: Any, exponent: Any) -> Any:
    if abs(exponent) > MAX_EXPONENT and abs(base) > 1:
        raise ExpressionError(f"the power {base} ** {exponent} is too large (exponents up to "
                              f"{MAX_EXPONENT})")
    return base ** exponent


class _GuardedPow(ast.NodeTransformer):
    """``a ** b`` becomes ``__pow(a, b)``: a huge power would run for minutes."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow):
            return ast.Call(func=ast.Name(id="__pow", ctx=ast.Load()),
                            args=[node.left, node.right], keywords=[])
        return node


class ExpressionError(OpatlasError, ValueError):
    """An expression that cannot be parsed or uses something that is not allowed (a
    ValueError too, so that a spec's validators report it as a bad value)."""


@dataclass(frozen=True)
class Expression:
    """A parsed, validated expression; call it with a parameter mapping."""

    source: str
    names: frozenset[str] = field(default_factory=frozenset)
    _code: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, source: str) -> Expression:
        if not isinstance(source, str) or not source.strip():
            raise ExpressionError("an expression must be a non-empty string")
        try:
            tree = ast.parse(source.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExpressionError(f"cannot parse expression {source!r}: {exc.msg}") from None
        names: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED_NODES):
                raise ExpressionError(
                    f"expression {source!r} uses {type(node).__name__}, which is not allowed"
                )
            if isinstance(node, ast.Call):
                if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
                    raise ExpressionError(
                        f"expression {source!r} calls something other than "
                        f"{sorted(_FUNCTIONS)}"
                    )
                if node.keywords:
                    raise ExpressionError(f"expression {source!r}: keyword arguments not allowed")
            elif isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
                names.add(node.id)
        tree = ast.fix_missing_locations(_GuardedPow().visit(tree))
        code = compile(tree, "<expression>", "eval")
        return cls(source=source.strip(), names=frozenset(names), _code=code)

    def conjuncts(self) -> list[Expression]:
        """The parts of a top-level ``a and b and ...`` in order (the expression itself when it
        is not one): a caller may judge a part on fewer parameters than the whole needs."""
        body = ast.parse(self.source, mode="eval").body
        if not (isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And)):
            return [self]
        parts: list[Expression] = []
        for value in body.values:
            part = Expression.parse(ast.get_source_segment(self.source, value) or "")
            parts.extend(part.conjuncts())
        return parts

    def __call__(self, params: Mapping[str, Any], on_zero: Any = False) -> Any:
        """The expression's value for ``params``; ``on_zero`` where it divides by zero."""
        missing = self.names.difference(params)
        if missing:
            raise ExpressionError(
                f"expression {self.source!r} names {sorted(missing)}, which the vector "
                f"does not have (it has {sorted(params)})"
            )
        scope = dict(_FUNCTIONS)
        scope.update(params)
        scope["__pow"] = _pow
        try:
            return eval(self._code, {"__builtins__": {}}, scope)
        except ZeroDivisionError:
            return on_zero
        except (TypeError, IndexError, KeyError) as exc:
            raise ExpressionError(f"expression {self.source!r}: {exc}") from None
