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
from typing import Any

import numpy as np

from opatlas.estimate.config import ClusterConfig

# collectives run as rings, whose node crossings spread over the rails of the group's ranks;
# an all-to-all's or a send's bytes each leave through their own rank's port
RING = ("all_reduce", "all_gather", "reduce_scatter")
# How measured samples without a reduce-scatter time one. Not the all-gather's samples, though
# a ring all-gather moves the same (n−1)/n·S: across nodes the two give about one bus bandwidth
# (medians 1.2, 2.3, and 3.9 against 4.3 GB/s on the bundled A100s' 2×1, 2×2, 2×4), but in a
# node the all-gathers reach 49 and 23 GB/s against the all-reduces' 69 and 210 on 1×2 and 1×4
# (torch's list all_gather; nccl-tests gives the three ring collectives one bus bandwidth),
# and they start at n·268 MB, the all-reduces at 42 MB.
REDUCE_SCATTER_RULE = ("half the measured all_reduce of the same bytes on the same ranks (a ring "
                       "all-reduce is a reduce-scatter then an all-gather, each half its traffic "
                       "and steps)")


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
    sizes the time scales linearly with the size, and below them too, down to the ring's
    latency steps (alpha-beta with the bandwidth of the smallest sample: a message smaller
    than any sample is not charged that sample's whole time). Falls back to alpha-beta where
    no file matches the topology.

    Curves are kept against S, the bytes :class:`AlphaBeta` takes. An all-reduce's and a
    send's ``shape`` is that whole message, but an all-gather's is each rank's *input*, 1/n
    of what it gathers (upstream's sampler gathers a tensor of ``shape`` from every rank, and
    its estimator passes ``parameters // dp``; across nodes only that reading gives the
    all-gathers the all-reduces' bus bandwidth): its curve is kept against n·2·shape. A
    reduce-scatter without samples of its own is :data:`REDUCE_SCATTER_RULE`."""

    NAMES = {"all_reduce": ("allreduce", "allreduce_large"), "all_gather": ("allgather_large",),
             "p2p": ("p2p",), "reduce_scatter": ()}

    def __init__(self, cluster: ClusterConfig, folder: Path, gpu: str) -> None:
        super().__init__(cluster)
        self.folder = folder
        self.curves: dict[tuple[str, int, int], Callable[[np.ndarray], np.ndarray]] = {}
        self.fallbacks: set[tuple[str, int, int]] = set()  # asked for, not measured
        self.smallest: dict[tuple[str, int, int], float] = {}  # each curve's least bytes
        self.derived: set[tuple[str, int, int]] = set()  # curves made of another's samples
        self.derived_used: set[tuple[str, int, int]] = set()  # of those, asked for
        for op, stems in self.NAMES.items():
            for nodes, gpn in {(1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (4, 1), (8, 1)}:
                files = [f for s in stems
                         if (f := folder / f"{gpu}_{s}_fp16_{nodes}_{gpn}.csv").exists()]
                if files:
                    sizes, seconds = _median_per_size(files)
                    message = sample_message_bytes(op, sizes, 2.0, nodes * gpn)
                    self.curves[(op, nodes, gpn)] = _loglog(message, seconds)
                    self.smallest[(op, nodes, gpn)] = float(np.min(message))
        self._derive_reduce_scatter()

    def _derive_reduce_scatter(self) -> None:
        """:data:`REDUCE_SCATTER_RULE` for each topology with an all-reduce curve but no
        reduce-scatter one."""
        for (op, nodes, gpn), all_reduce in list(self.curves.items()):
            key = ("reduce_scatter", nodes, gpn)
            if op == "all_reduce" and key not in self.curves:
                self.curves[key] = _halved(all_reduce)
                self.smallest[key] = self.smallest[(op, nodes, gpn)]
                self.derived.add(key)

    def time_topology(self, op: str, nbytes: np.ndarray, nodes: int, gpn: int,
                      within_node: bool) -> np.ndarray:
        curve = self.curves.get((op, nodes, gpn))
        if (op, nodes, gpn) in self.derived:
            self.derived_used.add((op, nodes, gpn))
        if curve is None:
            self.fallbacks.add((op, nodes, gpn))
            return self.time(op, nbytes, nodes * gpn, within_node, gpn)
        q = np.asarray(nbytes, dtype=float)
        t = curve(q)
        smallest = self.smallest[(op, nodes, gpn)]
        below = q < smallest
        if below.any():
            latency = self.time(op, np.zeros(1), nodes * gpn, within_node, gpn)[0]
            t_lo = float(curve(np.array([smallest]))[0])
            t = np.where(below, latency + max(t_lo - latency, 0.0) * q / smallest, t)
        return t


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


def sample_message_bytes(op: str, shape: Any, word: float, ranks: Any) -> Any:
    """The message S of estimate-train-time NCCL samples of ``shape`` elements of ``word``
    bytes on ``ranks`` ranks (the bytes :class:`AlphaBeta` takes): the whole message, but for
    an all-gather, whose ``shape`` is each rank's input, the n·shape it gathers."""
    return shape * word * (ranks if op == "all_gather" else 1)


def _halved(curve: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda q: 0.5 * curve(q)


def _loglog(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Log-log interpolation of the samples; beyond the largest, its bandwidth. Below the
    smallest it holds the smallest's time, which :meth:`Measured.time_topology` replaces."""
    order = np.argsort(x)
    lx, ly = np.log(x[order]), np.log(y[order])
    hi = np.exp(lx[-1])

    def f(q: np.ndarray) -> np.ndarray:
        inside = np.exp(np.interp(np.log(np.maximum(q, 1.0)), lx, ly))
        return np.where(q > hi, np.exp(ly[-1]) * q / hi, inside)
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


def take_derived_note(comm: AlphaBeta) -> str | None:
    """The collectives a measured model timed by :data:`REDUCE_SCATTER_RULE` since the last
    call, as one note; and forget them."""
    if not isinstance(comm, Measured) or not comm.derived_used:
        return None
    shapes = ", ".join(f"{nodes}×{gpn}" for _, nodes, gpn in sorted(comm.derived_used))
    comm.derived_used.clear()
    return (f"no reduce-scatter samples in {comm.folder} for {shapes} (nodes × GPUs per node): "
            f"reduce_scatter is timed as {REDUCE_SCATTER_RULE}")
