"""A reblocking view: how a producer's core grid maps onto a consumer's, from the transfer
plan — fan-in (producer cores each consumer gathers from, and how many producers' worth of
data), fan-out, reads per core — and the simulator's predicted cost. Data movement is cheapest
when the mapping is 1-1 (the PyBuda perf-analyzer guide's rule of thumb). The cost is the
simulator's under the bundled calibrated parameters unless others are given, as the
``wormhole-sim`` backend and ``reshard_time_ns`` price it: 0 ns when both sides have the same
memory config (ttnn's ``to_memory_config`` returns the tensor unchanged), said in ``note``."""

from __future__ import annotations

from dataclasses import dataclass

from opatlas.tenstorrent.sim import WormholeParams, calibrated_params, identical, simulate

IDENTITY_NOTE = ("same grid and strategy on both sides: ttnn's to_memory_config returns the "
                 "tensor unchanged, so no data moves and no kernel runs (predicted_ns 0); "
                 "fan-in, fan-out and reads are what a copy would do")


@dataclass
class Reblock:
    producer: tuple[int, int]
    consumer: tuple[int, int]
    fan_in: int              # most producer cores one consumer core reads from
    gathered: float          # producers' worth of data per consumer core (mean)
    fan_out: int             # most consumer cores one producer core feeds
    max_reads: int           # most NoC reads issued by one consumer core
    predicted_ns: float
    note: str | None = None  # why the prediction is what it is, where that needs saying

    def as_json(self) -> dict:
        return {k: (f"{v[0]}x{v[1]}" if isinstance(v, tuple) else v) for k, v in vars(self).items()
                if v is not None}


def reblock(ht: int, wt: int, producer: tuple[int, int], consumer: tuple[int, int],
            strategy: str = "BLOCK", consumer_strategy: str | None = None,
            params: WormholeParams | None = None) -> Reblock:
    """Grids as (x columns, y rows); ``ht``, ``wt`` in tiles; ``params``: the calibrated ones
    when None (the first-principles defaults are uncalibrated guesses)."""
    out_strategy = consumer_strategy or strategy
    sim = simulate(ht, wt, producer, strategy, consumer, out_strategy,
                   params or calibrated_params())
    # every page is read once, so a consumer core gathers producer/consumer cores' worth
    gathered = (producer[0] * producer[1]) / (consumer[0] * consumer[1])
    same = identical(producer, strategy, consumer, out_strategy)
    return Reblock(producer, consumer, sim.fan_in, gathered, sim.fan_out, sim.max_strides,
                   0.0 if same else sim.time_ns, IDENTITY_NOTE if same else None)
