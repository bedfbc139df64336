"""Collective times: alpha-beta ring models, or the measured NCCL samples of a cluster.

Ring costs for n ranks and S bytes (nccl-tests' bus-bandwidth factors): all-reduce
2(n−1)/n·S/B + 2(n−1)·α; all-gather and reduce-scatter (n−1)/n·S/B + (n−1)·α (S = the full
buffer); all-to-all the same with S = one rank's buffer ((n−1)/n of it leaves the rank);
point-to-point (``p2p``, or ``send_recv`` as ``opatlas collectives`` names it) S/B + α. B and
α are the intra-node link's when the group fits in a node. A group that spans nodes with k of
its ranks in each node runs its rings (NCCL's channels) over the k network ports of those
ranks, one rail per GPU as in a DGX: its bus bandwidth is the smaller of k ports and the
intra-node link (a ring crosses each node once per channel, and the channels spread over the
k rails), with the network's latency. A point-to-point send gets one port. An all-to-all
over n ranks, g in each node, sends S/n to every other rank: (n−g)/n·S leaves the node
through the rank's own port while (g−1)/n·S goes over the intra-node link at the same time,
so it takes max((n−g)/n·S/B_net + (n−g)·α_net, (g−1)/n·S/B_intra + (g−1)·α_intra) (g = n
is the in-node formula, g = 1 the one-port one).
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


# the model's names of the collectives, and the other names it takes for them
COLLECTIVES = (*RING, "all_to_all", "p2p")
ALIASES = {"send_recv": "p2p"}  # opatlas collectives' name of a point-to-point send


def canonical_op(op: str) -> str:
    """``op`` as the model names it (``send_recv`` is ``p2p``); ValueError if unknown."""
    name = ALIASES.get(op, op)
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r} (known: "
                         f"{', '.join(COLLECTIVES + tuple(ALIASES))})")
    return name


def checked_sizes(op: str, nbytes: Any, n: int) -> np.ndarray:
    """``nbytes`` as floats, after refusing a group of fewer than one rank and a negative (or
    NaN) message size: either is a caller's mistake, not a zero-time collective."""
    if n < 1:
        raise ValueError(f"collective {op}: a group of {n} ranks (n must be >= 1)")
    sizes = np.asarray(nbytes, dtype=float)
    bad = ~(sizes >= 0)
    if bad.any():
        raise ValueError(f"collective {op}: message size "
                         f"{np.format_float_positional(sizes[bad].flat[0], trim='-')} bytes "
                         f"(sizes must be >= 0)")
    return sizes


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
        op = canonical_op(op)
        nbytes = checked_sizes(op, nbytes, n)
        if n == 1:
            return np.zeros_like(nbytes)
        if op == "all_to_all":
            return self._all_to_all(nbytes, n, n if within_node else per_node)
        bw, alpha = self._link(within_node, per_node if op in RING else 1)
        if op == "all_reduce":
            return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * alpha
        if op in ("all_gather", "reduce_scatter"):
            return (n - 1) / n * nbytes / bw + (n - 1) * alpha
        return nbytes / bw + alpha  # p2p

    def _all_to_all(self, nbytes: np.ndarray, n: int, per_node: int) -> np.ndarray:
        """Each rank sends S/n to each of the n−1 others: to the g−1 in its node over the
        intra-node link, to the n−g beyond it through its one port, both at once."""
        g = min(max(1, per_node), n)
        net_bw, net_alpha = self._link(False, 1)
        nvl_bw, nvl_alpha = self._link(True, 1)
        net = (n - g) / n * nbytes / net_bw + (n - g) * net_alpha
        nvl = (g - 1) / n * nbytes / nvl_bw + (g - 1) * nvl_alpha
        return np.maximum(net, nvl)


class Measured(AlphaBeta):
    """Interpolates measured samples (estimate-train-time's NCCL CSVs: ``shape`` elements of
    fp16, ``dur(us)``) per (collective, nodes, GPUs per node), log-log, through a robust
    monotone fit of them (:func:`_loglog`: the samples are noisy, some sizes taking 2 to 4
    times their neighbours'); beyond the sampled sizes at the median bandwidth of the largest
    ones, and below them down to the ring's latency steps (alpha-beta with the bandwidth of
    the smallest sample: a message smaller than any sample is not charged that sample's whole
    time). Falls back to alpha-beta where no file matches the topology.

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
        # the devices the folder holds samples of when ``gpu`` is none of them (set by the
        # caller that matched the device's name): every collective is then a fallback
        self.other_devices: list[str] | None = None
        self.device = gpu
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
        op = canonical_op(op)
        if nodes < 1 or gpn < 1:
            raise ValueError(f"collective {op}: {nodes} nodes × {gpn} GPUs per node (both "
                             f"must be >= 1)")
        q = checked_sizes(op, nbytes, nodes * gpn)
        curve = self.curves.get((op, nodes, gpn))
        if (op, nodes, gpn) in self.derived:
            self.derived_used.add((op, nodes, gpn))
        if curve is None:
            self.fallbacks.add((op, nodes, gpn))
            return self.time(op, nbytes, nodes * gpn, within_node, gpn)
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


# samples whose sizes lie within this factor of a bin's smallest are one size: their times
# differ by less than that (at most 1% at a constant bandwidth), far less than their noise
NEAR = 1.01
# the bandwidth beyond the samples: the median over those within this factor of the largest,
# and over at least TAIL_MIN of them
TAIL_SPAN, TAIL_MIN = 1.05, 5


def _loglog(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Log-log interpolation of a robust monotone fit of the samples (sizes ``x``, seconds
    ``y``); beyond the largest, a constant bandwidth. Below the smallest it holds the
    smallest's time, which :meth:`Measured.time_topology` replaces.

    The bundled samples have one time a size, and up to a quarter of them (in a node) take 1.5
    to 4 times their neighbours; the largest of the 1×4 all-reduces is one, and extrapolating
    from it alone gave 96 GB/s of bus bandwidth beyond it against 226. So: (1) near-identical
    sizes (within :data:`NEAR`) are one bin, its median size and median time; (2) the bins'
    times are fitted by an isotonic regression in the L1 norm (:func:`_isotonic_median`): the
    non-decreasing sequence nearest to them in absolute deviation, whose every level is the
    median of the bins it pools. Time cannot fall as the message grows, and a median ignores an
    outlier where a least-squares (mean) isotonic fit would spread it over its neighbours and a
    running maximum would carry it upwards for good; where the samples already rise it changes
    nothing. (3) Beyond the last bin the time grows at the median bandwidth (bytes/s) of the
    largest samples (:data:`TAIL_SPAN`, :data:`TAIL_MIN`), from the fit's last time:
    continuous, and never the slope of one point."""
    order = np.argsort(x)
    x, y = np.asarray(x, dtype=float)[order], np.asarray(y, dtype=float)[order]
    bx, by, counts = _bins(x, y)
    lx, ly = np.log(bx), _isotonic_median(np.log(by), counts)
    hi, t_hi = bx[-1], float(np.exp(ly[-1]))
    tail = x >= min(x[-1] / TAIL_SPAN, x[max(0, len(x) - TAIL_MIN)])
    bandwidth = float(np.median(x[tail] / y[tail]))

    def f(q: np.ndarray) -> np.ndarray:
        inside = np.exp(np.interp(np.log(np.maximum(q, 1.0)), lx, ly))
        return np.where(q > hi, t_hi + (q - hi) / bandwidth, inside)
    return f


def _bins(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(median size, median time, samples) of each run of sorted sizes within :data:`NEAR` of
    the run's first."""
    starts = [0]
    for i, size in enumerate(x.tolist()):
        if size > x[starts[-1]] * NEAR:
            starts.append(i)
    first = np.array(starts)
    counts = np.diff(np.append(first, len(x)))
    group = np.repeat(np.arange(len(first)), counts)
    lo, hi = first + (counts - 1) // 2, first + counts // 2  # each bin's middle one or two

    def medians(v: np.ndarray) -> np.ndarray:  # every bin's median at once, sorted within bins
        v = np.asarray(v, dtype=float)[np.lexsort((v, group))]
        return (v[lo] + v[hi]) / 2

    return medians(x), medians(y), counts.astype(float)


def _weighted_median(v: np.ndarray, w: np.ndarray) -> float:
    """The median of values ``v`` counted ``w`` times each; midway between the two middle
    values when the weight splits evenly between them."""
    order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(w[order])
    i = int(np.searchsorted(cum, cum[-1] / 2))
    if cum[i] == cum[-1] / 2 and i + 1 < len(v):
        return float((v[i] + v[i + 1]) / 2)
    return float(v[i])


def _isotonic_median(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The L1 isotonic regression of ``y`` (weights ``w``) by pool-adjacent-violators: a
    value below the level before it pools with that level's values, at their weighted
    median, until the levels rise."""
    blocks: list[tuple[list[float], list[float], float]] = []  # values, weights, level
    for value, weight in zip(y.tolist(), w.tolist(), strict=True):
        vals, wts, level = [value], [weight], value
        while blocks and blocks[-1][2] > level:
            pv, pw, _ = blocks.pop()
            vals, wts = pv + vals, pw + wts
            level = _weighted_median(np.array(vals), np.array(wts))
        blocks.append((vals, wts, level))
    return np.array([b[2] for b in blocks for _ in b[0]])


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
    if comm.other_devices is not None:  # not some shapes missing: the device's samples are
        held = ", ".join(comm.other_devices) or "none"
        return (f"no measured collectives for device {comm.device!r} in {comm.folder} (it "
                f"holds {held}): the alpha-beta model (cluster bandwidths and latencies) "
                f"times every collective, {which} (nodes × GPUs per node)")
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
