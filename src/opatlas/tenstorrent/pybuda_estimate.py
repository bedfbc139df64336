"""What a PyBuda netlist alone says before any run: per op the op model's cycles and the
balancer's limiter cycles (opmodel.py), per epoch the pipeline cycles (its slowest op) and
samples/s, and a reblocking report for every producer→consumer edge inside an epoch — grid and
block mismatch and the consumer's fan-in, with the Wormhole simulator's cost where the edge is
a plain block-sharded reshard (``opatlas reblock``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from opatlas.tenstorrent.netlist import Netlist, NetOp, Queue
from opatlas.tenstorrent.opmodel import (
    OpEstimate,
    estimate,
    input_pipe,
    input_tiles_per_core,
    tile_bytes,
)
from opatlas.tenstorrent.pybuda_run import epoch_key
from opatlas.tenstorrent.reblock import reblock
from opatlas.tenstorrent.reshard import is_tilable


@dataclass
class NetlistEstimate:
    netlist: Netlist
    spatial_epochs: bool
    ops: list[tuple[NetOp, OpEstimate]]     # in epoch order, slowest first within an epoch
    epoch_summary: list[dict[str, Any]]
    model_summary: dict[str, Any]
    reblocking: list[dict[str, Any]]


def epochs_of(nl: Netlist, spatial: bool) -> list[dict[str, NetOp]]:
    n = len(nl.graphs) if spatial else max(nl.temporal) + 1
    out: list[dict[str, NetOp]] = [{} for _ in range(n)]
    for op in nl.all_ops():
        out[epoch_key(op, spatial)][op.name] = op
    return out


def estimate_netlist(nl: Netlist, spatial_epochs: bool = False,
                     simulate_reblocks: bool = True) -> NetlistEstimate:
    total_cores = nl.core_count * (1 if spatial_epochs else nl.device_count)
    rows: list[tuple[NetOp, OpEstimate]] = []
    summaries, edges = [], []
    for e, ops in enumerate(epochs_of(nl, spatial_epochs)):
        ests = [(op, estimate(op, nl, ops)) for op in ops.values()]
        ests.sort(key=lambda x: -(x[1].limiter_cycles or 0))
        rows.extend(ests)
        summaries.append(_epoch_summary(e, ests, nl, total_cores))
        edges.extend(reblocking(e, ops, simulate_reblocks))
    cycles = sum(s["pipeline_cycles"] for s in summaries)
    model = {"overall_speed": int(nl.clock_hz / cycles) if cycles else None,
             "pipeline_cycles": cycles,
             "unmodelled_ops": sum(1 for _, est in rows if est.cycles is None)}
    return NetlistEstimate(nl, spatial_epochs, rows, summaries, model, edges)


def _epoch_summary(e: int, ests: list[tuple[NetOp, OpEstimate]], nl: Netlist,
                   total_cores: int) -> dict[str, Any]:
    """An epoch's pipeline, rate and ``balancer_util``: PyBuda's *balancer* util, the ops'
    op-model cycles weighted by their cores over the pipeline (the slowest op's limiter
    cycles) and the cores, a percent with one decimal. It has no math utilization in it (a
    measured run's ``math_util`` has: each op's measured bw_util), so the two are named
    apart; a measured run's ``balancer_util`` is this rule on op_perf.csv's cycles."""
    modelled = [(op, est) for op, est in ests if est.limiter_cycles is not None]
    if not modelled:
        return {"epoch": e, "slowest_op": None, "pipeline_cycles": 0, "inputs_per_second": None,
                "balancer_util": None, "matmul_cores": 0, "ops": len(ests),
                "unmodelled": len(ests)}
    op, est = max(modelled, key=lambda x: x[1].limiter_cycles)
    pipeline = est.limiter_cycles
    rate = int(nl.clock_hz / pipeline) or int(100 * nl.clock_hz / pipeline) / 100
    util = sum(o.cores * (x.cycles or 0) for o, x in modelled) / pipeline / total_cores
    # the slowest op's limiter and pipe problem are its row's: analyze.sources.pybuda.epoch_limiters
    return {"epoch": e, "slowest_op": op.name,
            "pipeline_cycles": pipeline, "inputs_per_second": rate,
            "balancer_util": int(1000 * util) / 10,
            "matmul_cores": sum(o.cores for o, _ in ests if o.type == "matmul"),
            "ops": len(ests), "unmodelled": len(ests) - len(modelled)}


@dataclass(frozen=True)
class Traffic:
    """The bytes one op moves per input, by where they come from or go (what the roofline's
    memory term may count: DRAM only; NoC and PCIe traffic have their own peaks)."""

    dram: float   # read from non-prologue DRAM queues, written to DRAM queues
    noc: float    # received over the NoC from ops of the same epoch (on chip, L1 to L1)
    pcie: float   # read from or written to host queues
    dram_bytes_s: float = 288e9  # the chip's DRAM peak (:func:`dram_peak_bytes_s`)


# DRAM peaks per chip, the largest board of each arch (a bound must not be above a real time):
# Wormhole n150/n300 288 GB/s a chip; Grayskull e150 118.4 GB/s (e75: 102.4)
DRAM_PEAK_BYTES_S = {"wormhole": 288e9, "grayskull": 118.4e9}


def dram_peak_bytes_s(arch: str) -> float:
    """The DRAM bandwidth of one chip of ``arch`` (a netlist's ``arch``: wormhole_b0 ...);
    Wormhole's for an arch not known here (the larger: a looser bound, never a wrong one)."""
    return next((v for k, v in DRAM_PEAK_BYTES_S.items() if arch.lower().startswith(k)),
                max(DRAM_PEAK_BYTES_S.values()))


def queue_bytes(q: Queue) -> float:
    """One entry of a queue: t · height · width tiles in the queue's data format."""
    ht, wt = q.out_tiles
    return float(q.t * ht * wt * tile_bytes(q.df))


def traffic(op: NetOp, nl: Netlist, graph_ops: dict[str, NetOp]) -> Traffic:
    """Per input: a DRAM input is its queue's entry read once (the least any schedule reads;
    a broadcast reads no more than the queue holds); the output is written once to each queue
    it feeds; NoC bytes are the tiles the op's cores receive from ops of the epoch (each core
    its own slice: a matmul's row / column strip of K)."""
    dram = noc = pcie = 0.0
    for i, name in enumerate(op.inputs):
        pipe = input_pipe(op, i, nl, graph_ops)
        if pipe == "noc":
            df = op.in_df[i] if i < len(op.in_df) else op.out_df
            noc += input_tiles_per_core(op, i) * tile_bytes(df) * op.cores
        elif pipe == "dram":
            dram += queue_bytes(nl.queues[name])
        elif pipe == "pcie":
            pcie += queue_bytes(nl.queues[name])
    for q in nl.queues.values():
        if q.producer == op.name:
            if q.loc == "host":
                pcie += queue_bytes(q)
            else:
                dram += queue_bytes(q)
    return Traffic(dram, noc, pcie, dram_peak_bytes_s(nl.arch))


def overlap(n: int, producers: int, consumers: int) -> int:
    """Most producer blocks one consumer block overlaps when ``n`` tiles are split evenly
    into ``producers`` and into ``consumers`` blocks (exact: block j covers [j·n/k, (j+1)·n/k))."""
    most = 0
    for j in range(consumers):
        first = (j * producers) // consumers
        last = -(-((j + 1) * producers) // consumers) - 1
        most = max(most, last - first + 1)
    return most


def _split(consumer: NetOp, i: int) -> tuple[int, int]:
    """How the consumer's grid splits input ``i`` (rows, columns): a matmul splits its
    activations by rows only and its weights by columns only; other ops by both."""
    r, c = consumer.grid
    if consumer.type == "matmul" and i < 2:
        return (r, 1) if i == 0 else (1, c)
    return r, c


def reblocking(epoch: int, ops: dict[str, NetOp], simulate: bool = True) -> list[dict[str, Any]]:
    edges = []
    for cons in ops.values():
        for i, name in enumerate(cons.inputs):
            prod = ops.get(name)
            if prod is None:
                continue  # a queue, not an op in this epoch
            edges.append(_edge(epoch, prod, cons, i, simulate))
    return edges


def _edge(epoch: int, prod: NetOp, cons: NetOp, i: int, simulate: bool) -> dict[str, Any]:
    ht, wt = prod.out_tiles
    parts = _split(cons, i)
    grid_match = prod.grid == cons.grid
    block_match = (prod.mblock, prod.ublock) == (cons.mblock, cons.ublock)
    tms = cons.input_tms.get(i)
    fan_in = None if tms else overlap(ht, prod.grid[0], parts[0]) * overlap(
        wt, prod.grid[1], parts[1])
    predicted, note = None, ""
    if tms:
        note = "input TMs reorder the tensor: fan-in not computed"
    elif not grid_match and parts == cons.grid and simulate:
        predicted, note = _simulated(ht, wt, prod.grid, cons.grid)
    return {"epoch": epoch, "producer": prod.name, "consumer": cons.name, "input": i,
            "producer_grid": f"{prod.grid[0]}x{prod.grid[1]}",
            "consumer_grid": f"{cons.grid[0]}x{cons.grid[1]}",
            "producer_block": f"{_blk(prod)}", "consumer_block": f"{_blk(cons)}",
            "reblock": not (grid_match and block_match), "fan_in": fan_in,
            "gathered": round(prod.cores / max(1, parts[0] * parts[1]), 3),
            "predicted_ns": predicted, "note": note}


def _blk(op: NetOp) -> str:
    return f"{op.mblock[0]}x{op.mblock[1]}/{op.ublock[0]}x{op.ublock[1]}"


@cache
def _simulated(ht: int, wt: int, prod: tuple[int, int], cons: tuple[int, int]
               ) -> tuple[float | None, str]:
    """The simulator's cost of the edge as a block-sharded reshard (grids in PyBuda's rows x
    columns; ``reblock`` takes columns x rows)."""
    pg, cg = (prod[1], prod[0]), (cons[1], cons[0])
    if not (is_tilable(ht, wt, *pg, "BLOCK") and is_tilable(ht, wt, *cg, "BLOCK")):
        return None, "not whole tiles on both grids: not simulated"
    return (float(reblock(ht, wt, pg, cg).predicted_ns),
            "wormhole-sim reshard, calibrated parameters")
