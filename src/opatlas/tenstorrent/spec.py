"""The built-in ``reshard`` spec: its op, and its expander (vectorised per suite)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from opatlas.errors import InvalidShape
from opatlas.expressions import Expression
from opatlas.ops.base import Op, Rule
from opatlas.ops.registry import register_op
from opatlas.spec import SweepSpec
from opatlas.sweep.builtin import register_builtin_spec
from opatlas.sweep.expand import DOWNSAMPLE_REASON, Expansion, Vector, in_part, register_expander
from opatlas.tenstorrent import reshard as rs

SUITE_SIZE = 9 * len(rs.SHAPE_STEPS) ** 2


def _tiles(p: Mapping[str, Any]) -> tuple[int, int]:
    shape = p["input_shape"]
    return int(shape[-2]) // rs.TILE, int(shape[-1]) // rs.TILE


def _reason(p: Mapping[str, Any]) -> str | None:
    ht, wt = _tiles(p)
    return rs.invalid_reason(ht, wt, rs.parse_grid(p["input_core_grid"]),
                             rs.parse_grid(p["output_core_grid"]), p["input_shard_strategy"],
                             p["output_shard_strategy"], p.get("dtype", "bfloat16"))


@register_op
class Reshard(Op):
    """ttnn ``to_memory_config`` between two L1 shardings (runs on wormhole-sim or ttnn)."""

    name = "reshard"
    params = ("input_shape", "input_core_grid", "output_core_grid", "input_shard_strategy",
              "output_shard_strategy")
    defaults = {"input_shard_orientation": "ROW_MAJOR", "output_shard_orientation": "ROW_MAJOR",
                "dtype": "bfloat16"}
    passes = ("fwd",)
    description = "L1-sharded reshard on Tenstorrent Wormhole (wormhole-sim / ttnn backends)"
    rules = (Rule("invalid reshard", lambda p: _reason(p) is None),)

    def invalid_reason(self, params: Mapping[str, Any]) -> str | None:
        return _reason(params)

    def min_bytes(self, p: Mapping[str, Any]) -> dict[str, float]:
        ht, wt = _tiles(p)
        return {"fwd": 2.0 * ht * wt * rs.TILE * rs.TILE * rs.DATUM_SIZE[p["dtype"]]}

    def features(self, p: Mapping[str, Any]) -> dict[str, float]:
        ht, wt = _tiles(p)
        return {"tiles": ht * wt, "height_tiles": ht, "width_tiles": wt}

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        raise InvalidShape("reshard runs on --backend wormhole-sim or --backend ttnn")


def reshard_spec() -> SweepSpec:
    grids = [rs.grid_name(x, y) for x in rs.GRID for y in rs.GRID]
    return SweepSpec(name="reshard", op="reshard", source="builtin", repeats=1, warmup=0,
                     max_per_suite=rs.MAX_PER_SUITE, suite_by=["input_core_grid",
                                                               "output_core_grid", "dtype"],
                     params={"input_core_grid": grids, "output_core_grid": grids,
                             "input_shard_strategy": list(rs.STRATEGIES),
                             "output_shard_strategy": list(rs.STRATEGIES),
                             "input_shape": "[1, 1, 32·j, 32·i], i, j in 1..249"})


def expand_reshard(spec: SweepSpec, *, parts: int, part: int, where: str | None,
                   keep_invalid: bool, materialize: bool) -> Expansion:
    select = Expression.parse(where) if where else None
    suite_level = select is None or not (select.names - SUITE_KEYS)
    out = Expansion()
    out.invalid = Counter()
    valid = 0
    for s_no, (gin, gout) in enumerate(rs.grid_pairs()):
        if select is not None and not _suite_may_match(select, gin, gout):
            continue
        suite = rs.expand_suite(gin, gout, max_per_suite=spec.max_per_suite)
        select_here = None if suite_level else select
        need_params = materialize or select_here is not None or parts > 1
        if not need_params:
            out.invalid.update(suite.invalid)
            out.invalid[DOWNSAMPLE_REASON] += suite.downsampled
            valid += len(suite)
            continue
        base = s_no * SUITE_SIZE
        for k in range(len(suite)):
            i = base + int(suite.index[k])
            if not in_part(i, parts, part):
                continue
            params = rs.vector_params(suite, k)
            if select_here is not None and not select_here(params):
                continue
            valid += 1
            if materialize:
                out.vectors.append(Vector.make("reshard", params, i))
        if suite_level and parts == 1:
            out.invalid.update(suite.invalid)
            out.invalid[DOWNSAMPLE_REASON] += suite.downsampled
    out.valid_override = None if materialize else valid
    if not out.invalid[DOWNSAMPLE_REASON]:
        del out.invalid[DOWNSAMPLE_REASON]
    return out


SUITE_KEYS = frozenset({"input_core_grid", "output_core_grid", "dtype"})


def _suite_may_match(select: Expression, gin: tuple[int, int], gout: tuple[int, int]) -> bool:
    """Skip whole suites when the selection only looks at the grids."""
    if select.names - SUITE_KEYS:
        return True
    return bool(select({"input_core_grid": rs.grid_name(*gin),
                        "output_core_grid": rs.grid_name(*gout), "dtype": "bfloat16"}))


register_builtin_spec("reshard", reshard_spec)
register_expander("reshard", expand_reshard)
