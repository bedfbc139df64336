"""Collective times: alpha-beta ring models, or the measured NCCL samples of a cluster.

Ring costs for n ranks and S bytes (nccl-tests' bus-bandwidth factors): all-reduce
2(n−1)/n·S/B + 2(n−1)·α; all-gather and reduce-scatter (n−1)/n·S/B + (n−1)·α (S = the full
buffer); all-to-all the same with S = one rank's buffer ((n−1)/n of it leaves the rank);
point-to-point S/B + α. B and α are the intra-node link's when the group fits in a
node. A group that spans nodes with k of its ranks in each node runs its rings (NCCL's
channels) over the k network ports of those ranks, one rail per GPU as in a DGX: its bus
bandwidth is the smaller of k ports and the intra-node link (a ring crosses each node once
per channel, and the channels spread over the k rails), with the network's latency. An
all-to-all or a point-to-point send gets one port: every rank's bytes are its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from opatlas.estimate.config import ClusterConfig

# collectives run as rings, whose node crossings spread over the rails of the group's ranks;
# an all-to-all's or a send's bytes each leave through their own rank's port
RING = ("all_reduce", "all_gather", "reduce_scatter")


class AlphaBeta:
    def __init__(self, cluster: ClusterConfig) -> None:
        self.c = cluster

    def _link(self, within_node: bool, per_node: int) -> tuple[float, float]:
        intra = self.c.intra_bw_gbps * 1e9
        if within_node:
            return intra, self.c.intra_latency_us * 1e-6
        rails = max(1, per_node) * self.c.inter_bw_gbps * 1e9
        return min(rails, intra), self.c.inter_latency_us * 1e-6

    def time(self, op: str, nbytes: np.ndarray, n: int, within_node: bool,
             per_node: int = 1) -> np.ndarray:
        """Seconds for each message size in ``nbytes`` on a group of ``n`` ranks, ``per_node``
        of them in each node when the group spans nodes."""
        nbytes = np.asarray(nbytes, dtype=float)
        if n <= 1:
            return np.zeros_like(nbytes)
        bw, alpha = self._link(within_node, per_node if op in RING else 1)
        if op == "all_reduce":
            return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * alpha
        if op in ("all_gather", "reduce_scatter", "all_to_all"):
            return (n - 1) / n * nbytes / bw + (n - 1) * alpha
        if op == "p2p":
            return nbytes / bw + alpha
        raise ValueError(f"unknown collective {op!r}")


class Measured(AlphaBeta):
    """Interpolates measured samples (estimate-train-time's NCCL CSVs: ``shape`` elements of
    fp16, ``dur(us)``) per (collective, nodes, GPUs per node), log-log; beyond the sampled
    sizes the time scales linearly with the size. Falls back to alpha-beta where no file
    matches the topology."""

    NAMES = {"all_reduce": ("allreduce", "allreduce_large"), "all_gather": ("allgather_large",),
             "p2p": ("p2p",), "reduce_scatter": ()}

    def __init__(self, cluster: ClusterConfig, folder: Path, gpu: str) -> None:
        super().__init__(cluster)
        self.folder = folder
        self.curves: dict[tuple[str, int, int], Callable[[np.ndarray], np.ndarray]] = {}
        self.fallbacks: set[tuple[str, int, int]] = set()  # asked for, not measured
        for op, stems in self.NAMES.items():
            for nodes, gpn in {(1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (4, 1), (8, 1)}:
                files = [f for s in stems
                         if (f := folder / f"{gpu}_{s}_fp16_{nodes}_{gpn}.csv").exists()]
                if files:
                    sizes, seconds = _median_per_size(files)
                    self.curves[(op, nodes, gpn)] = _loglog(2.0 * sizes, seconds)

    def time_topology(self, op: str, nbytes: np.ndarray, nodes: int, gpn: int,
                      within_node: bool) -> np.ndarray:
        curve = self.curves.get((op, nodes, gpn))
        if curve is None:
            self.fallbacks.add((op, nodes, gpn))
            return self.time(op, nbytes, nodes * gpn, within_node, gpn)
        return curve(np.asarray(nbytes, dtype=float))


def _median_per_size(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """(each distinct ``shape`` of nccl samples, the median of its ``dur(us)`` in seconds)."""
    parts = []
    for f in files:
        with f.open() as fh:
            header = fh.readline().strip().split(",")
            cols = (header.index("shape"), header.index("dur(us)"))
            parts.append(np.loadtxt(fh, delimiter=",", usecols=cols, ndmin=2))
    shape, dur = np.concatenate(parts).T
    sizes, codes = np.unique(shape, return_inverse=True)
    d = dur[np.lexsort((dur, codes))]  # grouped by size, each group sorted
    counts = np.bincount(codes.reshape(-1))
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    median = (d[start + (counts - 1) // 2] + d[start + counts // 2]) / 2
    return sizes, median * 1e-6


def _loglog(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    order = np.argsort(x)
    lx, ly = np.log(x[order]), np.log(y[order])

    def f(q: np.ndarray) -> np.ndarray:
        q = np.maximum(q, 1.0)
        inside = np.exp(np.interp(np.log(q), lx, ly))
        lo, hi = np.exp(lx[0]), np.exp(lx[-1])
        return np.where(q > hi, np.exp(ly[-1]) * q / hi,
                        np.where(q < lo, np.exp(ly[0]), inside))
    return f


def take_fallback_note(comm: AlphaBeta) -> str | None:
    """The collectives a measured model had no samples for since the last call (they were
    timed by the alpha-beta model), as one note; and forget them."""
    if not isinstance(comm, Measured) or not comm.fallbacks:
        return None
    by_op: dict[str, list[str]] = {}
    for op, nodes, gpn in sorted(comm.fallbacks):
        by_op.setdefault(op, []).append(f"{nodes}×{gpn}")
    which = "; ".join(f"{op} on {', '.join(shapes)}" for op, shapes in by_op.items())
    comm.fallbacks.clear()
    return (f"no measured samples in {comm.folder} for {which} (nodes × GPUs per node): the "
            f"alpha-beta model (cluster bandwidths and latencies) is used for them")
