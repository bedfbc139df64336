"""The built-in ``reshard`` spec: its op, and its expander (vectorised per suite)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from opatlas.errors import InvalidShape
from opatlas.expressions import Expression
from opatlas.ops.base import Op, Rule
from opatlas.ops.registry import register_op
from opatlas.spec import SweepSpec
from opatlas.sweep.builtin import register_builtin_spec
from opatlas.sweep.expand import (
    DOWNSAMPLE_REASON,
    ExpansionBatch,
    Vector,
    VectorStream,
    divides_by_zero,
    in_part,
    register_expander,
    selected,
)
from opatlas.tenstorrent import reshard as rs

SUITE_SIZE = 9 * len(rs.SHAPE_STEPS) ** 2


def _tiles(p: Mapping[str, Any]) -> tuple[int, int]:
    """(height, width) in tiles, every dim but the last folded into the height as ttnn does."""
    try:
        return rs.shape_tiles(p["input_shape"])
    except ValueError as exc:
        raise InvalidShape(f"reshard input_shape: {exc}") from None


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
        return {"fwd": 2.0 * ht * wt * rs.TILE_BYTES[p["dtype"]]}

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


def expand_reshard(stream: VectorStream) -> Iterator[ExpansionBatch]:
    """One batch per suite (at most ``max_per_suite`` vectors). Invalid points are counted
    when the selection is by suite and the sweep is whole (they are never listed one by one)."""
    spec, select = stream.spec, stream.select
    suite_level = select is None or not (select.names - SUITE_KEYS)
    parts = select.conjuncts() if select is not None else []  # parsed once, not per suite
    for s_no, (gin, gout) in enumerate(rs.grid_pairs()):
        if select is not None and not _suite_may_match(stream, select, parts, gin, gout, s_no):
            continue
        suite = rs.expand_suite(gin, gout, max_per_suite=spec.max_per_suite)
        if suite_level and stream.parts == 1:
            stream.invalid.update(suite.invalid)
            stream.invalid[DOWNSAMPLE_REASON] += suite.downsampled
        select_here = None if suite_level else select
        if not (stream.materialize or select_here is not None or stream.parts > 1):
            yield ExpansionBatch(valid=len(suite))
            continue
        yield _suite_batch(stream, suite, s_no * SUITE_SIZE, select_here)


def _suite_batch(stream: VectorStream, suite: rs.Suite, base: int,
                 select: Expression | None) -> ExpansionBatch:
    """The suite's vectors in this part and selection (grid point ``base`` + its index)."""
    batch = ExpansionBatch()
    for k in range(len(suite)):
        i = base + int(suite.index[k])
        if not in_part(i, stream.parts, stream.part):
            continue
        params = rs.vector_params(suite, k)
        if select is not None and not selected(stream, select, params):
            continue
        batch.valid += 1
        if stream.materialize:
            batch.vectors.append(Vector.make("reshard", params, i))
    return batch


SUITE_KEYS = frozenset({"input_core_grid", "output_core_grid", "dtype"})


def _suite_may_match(stream: VectorStream, select: Expression, parts: list[Expression],
                     gin: tuple[int, int], gout: tuple[int, int], s_no: int) -> bool:
    """Whether any point of the suite may be selected, judged on the selection's ``and``-parts
    that look at the grids alone (a suite is over half a million points: expanding every one
    to test a shape would take minutes). Where such a part divides by zero before any part
    on the points, the suite is skipped and its points in this part counted under that
    reason, as point by point."""
    suite = {"input_core_grid": rs.grid_name(*gin), "output_core_grid": rs.grid_name(*gout),
             "dtype": "bfloat16"}
    by_point = False  # a part on the points came first: it may leave a point unjudged
    for part in parts:  # select's conjuncts
        if part.names - SUITE_KEYS:
            by_point = True
            continue
        chosen = part(suite, on_zero=None)
        if chosen is None and by_point:
            return True
        if chosen is None:
            first = s_no * SUITE_SIZE
            points = range(first + (stream.part - 1 - first) % stream.parts,
                           first + SUITE_SIZE, stream.parts)
            stream.invalid[divides_by_zero(select)] += len(points)
        if not chosen:
            return False
    return True


register_builtin_spec("reshard", reshard_spec)
register_expander("reshard", expand_reshard)
