"""A reblocking view: how a producer's core grid maps onto a consumer's, from the transfer
plan — fan-in (producer cores each consumer gathers from, and how many producers' worth of
data), fan-out, reads per core — and the simulator's predicted cost. Data movement is cheapest
when the mapping is 1-1 (the PyBuda perf-analyzer guide's rule of thumb)."""

from __future__ import annotations

from dataclasses import dataclass

from opatlas.tenstorrent.plan import core_plan, shards
from opatlas.tenstorrent.sim import WormholeParams, simulate


@dataclass
class Reblock:
    producer: tuple[int, int]
    consumer: tuple[int, int]
    fan_in: int              # most producer cores one consumer core reads from
    gathered: float          # producers' worth of data per consumer core (mean)
    fan_out: int             # most consumer cores one producer core feeds
    max_reads: int           # most NoC reads issued by one consumer core
    predicted_ns: float

    def as_json(self) -> dict:
        return {k: (f"{v[0]}x{v[1]}" if isinstance(v, tuple) else v) for k, v in vars(self).items()}


def reblock(ht: int, wt: int, producer: tuple[int, int], consumer: tuple[int, int],
            strategy: str = "BLOCK", consumer_strategy: str | None = None,
            params: WormholeParams | None = None) -> Reblock:
    """Grids as (x columns, y rows); ``ht``, ``wt`` in tiles."""
    cs = consumer_strategy or strategy
    plan = core_plan(ht, wt, producer, strategy, consumer, cs)
    producer_shard = ht * wt // len(shards(ht, wt, producer, strategy))
    fan_out: dict = {}
    for c in plan:
        for s in c.sources:
            fan_out[s] = fan_out.get(s, 0) + 1
    sim = simulate(ht, wt, producer, strategy, consumer, cs, params)
    return Reblock(producer, consumer, max(len(c.sources) for c in plan),
                   sum(sum(c.pages) for c in plan) / len(plan) / producer_shard,
                   max(fan_out.values()), max(sum(c.strides) for c in plan), sim.time_ns)
