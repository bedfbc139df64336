"""Why a row takes its time: achieved FLOP/s and bytes/s against the device's peaks, the roofline
time, the Orojenesis minimum DRAM traffic of GEMM-like ops at the device's on-chip buffer, the
bound (the largest of these times), the headroom (time / bound), the limiter, and a flag on
rows whose time is under their bound (headroom < 1: the data contradict the bound).

Every source computes its rows' FLOPs, bytes and GEMM dimensions its own way, then calls
:func:`explain` once on the whole table (vectorised but for one frontier per distinct GEMM).

A device outside the catalog is described by its own data (:func:`empirical_peaks`): the best
FLOP/s and bytes/s its rows attain. Its bandwidth is only that of rows that can show it: see
:data:`MEMORY_EVIDENCE_INTENSITY`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from opatlas.analyze.model import Column

# a row this many times slower than every bound is limited by something no bound models:
# launch latency, synchronisation, small-kernel overhead
OVERHEAD_HEADROOM = 10.0
Gemm = tuple[int, int, int, int]  # (batch, M, K, N): batch x [M, K] x [K, N]
BELOW_BOUND = "below bound"  # the flag of a row whose time is under its bound
# A row doing at most this many FLOPs per byte of its minimum traffic (element-wise ops,
# normalisations, GEMVs: about 0.1 to 1) is memory-bound on any device whose ridge point (peak
# FLOP/s / bandwidth) is above it, which every catalog device's is (fp32: A100 ~10, a server
# CPU ~5 to 20): its bytes/s is evidence of the bandwidth. A GEMM (tens to thousands of FLOP/B)
# is not: its bytes/s is set by its compute, far under the bandwidth.
MEMORY_EVIDENCE_INTENSITY = 2.0


@dataclass(frozen=True)
class Peaks:
    """The device the rows ran (or would run) on."""

    name: str
    flops_s: float  # dense peak at the rows' dtype
    bytes_s: float  # off-chip memory bandwidth
    onchip_bytes: float  # the on-chip buffer the Orojenesis bound assumes (0: none known)
    word_bytes: int = 2

    @property
    def memory_roof(self) -> bool:
        """False for an empirical device whose data cannot show its bandwidth (``bytes_s``
        infinite): rows are then bounded by compute alone."""
        return bool(np.isfinite(self.bytes_s))


def memory_evidence(flops: Any, nbytes: Any) -> bool:
    """Whether some row can evidence the bandwidth: it moves bytes at an operational intensity
    of at most :data:`MEMORY_EVIDENCE_INTENSITY` FLOP/B."""
    f = np.asarray(pd.to_numeric(pd.Series(flops), errors="coerce"), dtype=float)
    b = np.asarray(pd.to_numeric(pd.Series(nbytes), errors="coerce"), dtype=float)
    f = np.where(np.isfinite(f), f, 0.0)  # no FLOPs counted: a pure data move
    ok = np.isfinite(b) & (b > 0)
    return bool(np.any(f[ok] <= MEMORY_EVIDENCE_INTENSITY * b[ok]))


def empirical_peaks_text(memory_roof: bool) -> str:
    """The summary's word on an empirical device's peaks (its ``peaks`` card)."""
    return ("empirical: the best its own data attain" if memory_roof else
            "empirical: the best its own data attain; no memory roof (bandwidth not shown by "
            "the data)")


def empirical_peaks(name: str, flops_s: float, bytes_s: float, dtype: str, word: int,
                    flops: Any, nbytes: Any, what: str = "measurements"
                    ) -> tuple[Peaks, list[str]]:
    """The peaks of a device outside the catalog, from the best FLOP/s (``flops_s``) and
    bytes/s (``bytes_s``) its own rows (``flops``, ``nbytes``) attain, and the notes that say
    so. When no row can evidence the bandwidth (:func:`memory_evidence`), ``bytes_s`` is only
    what compute-bound rows happened to move: the peaks then have no memory roof (infinite
    bandwidth) rather than that underestimate, which would make those rows "memory"-bound."""
    roof = memory_evidence(flops, nbytes)
    bandwidth = f", {bytes_s / 1e9:,.2f} GB/s" if roof else ""  # else no roof: said below
    notes = [f"{name} is not in the catalog: its peaks are empirical, the best its own {what} "
             f"attain ({flops_s / 1e9:,.2f} GFLOP/s {dtype}{bandwidth}), not a "
             f"datasheet's: util is relative to them, and 100% is the best measured, not the "
             f"device's limit"]
    if roof:
        return Peaks(name, flops_s, bytes_s, 0.0, word), notes
    notes.append(f"{name}: no memory roof: none of its {what} can show its bandwidth (each "
                 f"does more than {MEMORY_EVIDENCE_INTENSITY:g} FLOPs per byte, so its bytes/s "
                 f"is set by its compute; the {bytes_s / 1e9:,.2f} GB/s they reach is not the "
                 f"bandwidth): bounds are from compute alone, and no row is 'memory'-limited")
    return Peaks(name, flops_s, math.inf, 0.0, word), notes
# (GEMM, word bytes, on-chip bytes) -> the Orojenesis minimum traffic (bytes); a few thousand
# distinct GEMMs in a big store, each a search of milliseconds
_TRAFFIC: dict[tuple[Gemm, int, float], float] = {}
POOL_MIN_GEMMS = 500  # fewer new GEMMs than this are searched in this process
CHUNK_GEMMS = 100  # GEMMs per task of the pool (and per step of the progress)


def gemm_traffic_bytes(gemm: Gemm, word_bytes: int, onchip_bytes: float) -> float:
    """The Orojenesis minimum DRAM traffic (bytes) of one GEMM with ``onchip_bytes`` on chip;
    3·MACs words (every operand moved per MAC) when the buffer is below every mapping's."""
    key = _key(gemm, word_bytes, onchip_bytes)
    if key not in _TRAFFIC:
        _TRAFFIC[key] = _search(key)
    return _TRAFFIC[key]


def _key(gemm: Sequence[int], word_bytes: int, onchip_bytes: float
         ) -> tuple[Gemm, int, float]:
    b, m, k, n = (max(1, int(x)) for x in gemm)
    return (b, m, k, n), int(word_bytes), float(onchip_bytes)


def _search(key: tuple[Gemm, int, float]) -> float:
    from opatlas.bounds import bmm
    from opatlas.bounds import gemm as gemm_einsum
    from opatlas.bounds.mapspace import TilingSpace
    from opatlas.bounds.prune import least_accesses

    (b, m, k, n), word, onchip = key
    einsum = gemm_einsum(m, k, n, word) if b == 1 else bmm(b, m, k, n, word)
    words = least_accesses(TilingSpace.of(einsum), onchip / word) if onchip > 0 else None
    return float(3 * einsum.macs if words is None else words) * word


def _search_all(keys: list[tuple[Gemm, int, float]]) -> list[float]:
    return [_search(k) for k in keys]


def unknown_traffic(gemms: Sequence[Sequence[Gemm] | None], peaks: Peaks
                    ) -> list[tuple[Gemm, int, float]]:
    """The distinct GEMMs of ``gemms`` whose traffic on ``peaks``' device is not yet known."""
    if peaks.onchip_bytes <= 0:
        return []
    return sorted({_key(g, peaks.word_bytes, peaks.onchip_bytes)
                   for gs in gemms if gs for g in gs} - _TRAFFIC.keys())


def search_traffic(keys: list[tuple[Gemm, int, float]], progress: Any = None,
                   workers: int | None = None, pool_min: int = POOL_MIN_GEMMS) -> None:
    """Search the Orojenesis traffic of ``keys`` (:func:`unknown_traffic`), in worker
    processes (:mod:`opatlas.pool`) when there are ``pool_min`` or more, so that
    :func:`explain` finds them known; ``progress`` is advanced by GEMMs done."""
    from opatlas.pool import each, workers_for

    if not keys:
        return
    n = workers_for(len(keys), workers) if len(keys) >= pool_min else 1
    size = min(CHUNK_GEMMS, -(-len(keys) // n))  # every worker gets some
    chunks = [keys[i:i + size] for i in range(0, len(keys), size)]
    for i, values in each(_search_all, chunks, n):
        _TRAFFIC.update(zip(chunks[i], values, strict=True))
        if progress is not None:
            progress.advance("ok", len(values))


def gemm_of(counts: Mapping[str, Any]) -> Gemm | None:
    """A catalog op's GEMM from its features (``batch_counts``): linears have tokens, in and
    out features, bmm/baddbmm batch, m, k, n. None for others; flash attention too: fused, the
    frontiers of its two GEMMs would count the score matrix it never writes."""
    keys = set(counts.keys())
    if {"tokens", "in_features", "out_features"} <= keys:
        return (1, int(counts["tokens"]), int(counts["in_features"]), int(counts["out_features"]))
    if {"batch", "m", "k", "n"} <= keys:
        return (int(counts["batch"]), int(counts["m"]), int(counts["k"]), int(counts["n"]))
    return None


def backward_gemms(g: Gemm) -> list[Gemm]:
    """The two GEMMs of a GEMM's backward: dA = dC·Bᵀ and dB = Aᵀ·dC."""
    b, m, k, n = g
    return [(b, m, n, k), (b, k, m, n)]


def pass_gemms(g: Gemm, pass_: str) -> list[Gemm]:
    """The GEMM kernels one call of a GEMM-like op runs in ``pass_``: its own (fwd,
    recompute) or its backward's two (bwd: :func:`backward_gemms`)."""
    return backward_gemms(g) if pass_ == "bwd" else [g]


GEMM_NAMES = ("dA = dC·Bᵀ", "dB = Aᵀ·dC")  # backward_gemms' two, of a forward C = A·B


def orojenesis_bytes(gemms: Sequence[Sequence[Gemm] | None], peaks: Peaks) -> np.ndarray:
    """Per row: the summed bound of one call's GEMMs (NaN for rows with none)."""
    out = np.full(len(gemms), np.nan)
    if peaks.onchip_bytes <= 0:
        return out
    for i, gs in enumerate(gemms):
        if gs:
            out[i] = sum(gemm_traffic_bytes(g, peaks.word_bytes, peaks.onchip_bytes)
                         for g in gs)
    return out


def explain(rows: pd.DataFrame, peaks: Peaks, total_time_s: float | None = None) -> pd.DataFrame:
    """Add the why-columns to ``rows``, which hold per row ``time_s``, ``calls``, ``flops`` and
    ``bytes`` (all calls), optionally ``gemms`` (one call's GEMMs, or None), ``comm_bound_s``
    (a collective's bandwidth-only time) and ``limiter`` (set for rows that are not kernels:
    communication, bubble). ``bound_time_s`` is NaN where no bound applies."""
    r = rows.copy()
    t = r["time_s"].to_numpy(float)
    calls = r["calls"].to_numpy(float)
    flops = pd.to_numeric(r["flops"], errors="coerce").to_numpy(float)
    nbytes = pd.to_numeric(r["bytes"], errors="coerce").to_numpy(float)
    total = float(np.nansum(t)) if total_time_s is None else total_time_s
    with np.errstate(divide="ignore", invalid="ignore"):
        r["time_per_call_s"] = np.where(calls > 0, t / calls, np.nan)
        r["share"] = t / total if total > 0 else np.nan
        r["achieved_flops_s"] = np.where(t > 0, flops / t, np.nan)
        r["achieved_bytes_s"] = np.where(t > 0, nbytes / t, np.nan)
    given = r["limiter"] if "limiter" in r else pd.Series([None] * len(r), index=r.index)
    kernel_row = given.isna().to_numpy()  # collectives, bubbles: no device roofline
    r["util_compute"] = np.where(kernel_row, r["achieved_flops_s"] / peaks.flops_s, np.nan)
    memory_row = kernel_row & peaks.memory_roof  # no memory roof: no memory bound nor util
    r["util_memory"] = np.where(memory_row, r["achieved_bytes_s"] / peaks.bytes_s, np.nan)
    compute_s = np.where(kernel_row, flops / peaks.flops_s, np.nan)
    memory_s = np.where(memory_row, nbytes / peaks.bytes_s, np.nan)
    r["roofline_time_s"] = np.fmax(compute_s, memory_s)
    gemms = r["gemms"].tolist() if "gemms" in r else [None] * len(r)
    oro = orojenesis_bytes([g if k else None for g, k in zip(gemms, kernel_row, strict=True)],
                           peaks) * calls
    r["orojenesis_bytes"] = oro
    r["orojenesis_time_s"] = oro / peaks.bytes_s if peaks.memory_roof else np.nan
    bound = np.fmax(r["roofline_time_s"].to_numpy(float), r["orojenesis_time_s"].to_numpy(float))
    comm = (pd.to_numeric(r["comm_bound_s"], errors="coerce").to_numpy(float)
            if "comm_bound_s" in r else np.full(len(r), np.nan))
    bound = np.where(np.isfinite(comm), comm, bound)
    bound = np.where(bound > 0, bound, np.nan)
    r["bound_time_s"] = bound
    # no time, no headroom (as no achieved rate): a row timed at zero (an op of a GPU trace
    # that launched no kernel, its work done on the host) is no evidence against its bound
    with np.errstate(divide="ignore", invalid="ignore"):
        r["headroom"] = np.where(t > 0, t / bound, np.nan)
    memory_side = np.fmax(memory_s, r["orojenesis_time_s"].to_numpy(float))
    kernel = np.where(compute_s >= np.nan_to_num(memory_side, nan=-1.0), "compute", "memory")
    kernel = np.where(np.isfinite(r["headroom"]) & (r["headroom"] > OVERHEAD_HEADROOM),
                      "overhead", kernel)
    kernel = np.where(np.isfinite(bound), kernel, "unknown")
    r["limiter"] = given.where(given.notna(), pd.Series(kernel, index=r.index))
    # the binding resource's utilisation: bytes/s for a memory-bound op, FLOP/s for a
    # compute-bound one; for an op far from both (overhead), the busier of the two
    busier = np.fmax(r["util_compute"].to_numpy(float), r["util_memory"].to_numpy(float))
    r["util"] = np.where(r["limiter"] == "memory", r["util_memory"],
                         np.where(r["limiter"] == "compute", r["util_compute"], busier))
    r["flags"] = flags_of(r)
    # ``gemms`` stays: one call's GEMM kernels as the source counted them (a trace's backward
    # mm is one kernel of its own shape, a config's backward the two of its forward GEMM),
    # which the report's frontier draws
    return r.drop(columns=[c for c in ("comm_bound_s",) if c in r])


def flags_of(r: pd.DataFrame) -> list[str]:
    """The rows' flags (any the source set, then the below-bound one, as PyBuda's rows)."""
    given = r["flags"].fillna("").astype(str).tolist() if "flags" in r else [""] * len(r)
    out = []
    for flag, h in zip(given, r["headroom"].to_numpy(float), strict=True):
        low = f"{BELOW_BOUND}: time is {h:.2f}x the bound" if h < 1 - 1e-9 else ""
        out.append(", ".join(f for f in (flag, low) if f))
    return out


# what may put an estimated row under its bound, by what timed it (a config's ``timed_by``
# column): the roofline's time is at least its own bound, so only a larger bound (Orojenesis)
# can be over it
TIMED_BY_WHY = {
    "roofline": "the roofline that timed them (ops.mode analytical, or an op the data lacks) "
                "moves the op catalog's minimum bytes, each tensor once, fewer than the "
                "Orojenesis traffic of their GEMM kernels at the device's on-chip buffer, "
                "which cannot hold their tiles whole",
    "model": "the fitted model that timed them (ops.mode data) may undershoot",
    "measured": "their measurement (--measured) may have kept its data in the cache between "
                "repetitions, or its timer is coarser than the kernel",
}
ESTIMATED_TAIL = "the step time and MFU include them"  # a config's rows make up its step


def below_bound_notes(rows: pd.DataFrame, what: str, why: str) -> list[str]:
    """One note on the rows whose time is under their bound (headroom < 1, flagged
    :data:`BELOW_BOUND`): how many, the (op, pass) pairs worst first with their count, and
    the lowest headroom. ``what``: the rows' times ("measurement(s)"); ``why``: what may
    explain them — not a fault of the bound (the least work at the device's peaks) but of the
    time or of the counts. Rows that say what timed them (``timed_by``: a config's estimated
    rows) are explained by that (:data:`TIMED_BY_WHY`) instead."""
    if "headroom" not in rows or rows.empty:
        return []
    low = rows[pd.to_numeric(rows["headroom"], errors="coerce") < 1 - 1e-9]
    if low.empty:
        return []
    if "timed_by" in low and low["timed_by"].isin(list(TIMED_BY_WHY)).all():
        why = _timed_why(low)
    by = low.groupby(["op", "pass"], sort=False)["headroom"].agg(["size", "min"])
    by = by.sort_values(["min", "size"], ascending=[True, False])
    named = ", ".join(f"{op} {pass_} ({int(n)})" for (op, pass_), n in by["size"].head(5).items())
    (op, pass_), worst = by.index[0], float(by["min"].iloc[0])
    return [f"{len(low)} {what} faster than their bound (headroom < 1): {named}"
            f"{' ...' if len(by) > 5 else ''}; the lowest is {worst:.2f}x ({op} {pass_}); "
            f"flagged '{BELOW_BOUND}': {why}"]


def _timed_why(low: pd.DataFrame) -> str:
    """What may explain ``low`` (rows under their bound), by what timed them, each cause
    with its rows (the (op, pass) pairs, as the note names them) when they are of several."""
    kinds = list(dict.fromkeys(low["timed_by"]))
    if len(kinds) == 1:
        return f"{TIMED_BY_WHY[kinds[0]]}; {ESTIMATED_TAIL}"
    parts = []
    for kind in kinds:
        pairs = low[low["timed_by"] == kind][["op", "pass"]].drop_duplicates()
        named = ", ".join(f"{op} {pass_}" for op, pass_ in pairs.itertuples(index=False))
        parts.append(f"{named}: {TIMED_BY_WHY[kind]}")
    return f"{'; '.join(parts)}; {ESTIMATED_TAIL}"


FLAGS_COLUMN = Column(key="flags", label="flags", role="text",
                      help=f"'{BELOW_BOUND}': the time is under its bound (headroom < 1): the "
                           f"data contradict the bound, check them")
# the columns explain() adds, described once for every view: the verdict first (what a
# person scans for), then the figures behind it
WHY_FIRST = [
    Column(key="time_per_call_s", label="per call", role="time", unit="s"),
    Column(key="share", label="share", role="ratio", unit="%", help="of the total time"),
    Column(key="util", label="util", role="util", unit="%",
           help="the binding resource's use: achieved bytes/s over the bandwidth for a "
                "memory-bound op, achieved FLOP/s over the peak for a compute-bound one, the "
                "busier of the two otherwise"),
    Column(key="headroom", label="headroom", role="ratio", unit="x",
           help="time / bound: how far from the limit"),
    Column(key="limiter", label="limiter", role="text"),
    FLAGS_COLUMN,
    Column(key="bound_time_s", label="bound", role="bound", unit="s",
           help="the largest of the bound times"),
]
WHY_REST = [
    Column(key="roofline_time_s", label="roofline", role="bound", unit="s",
           help="max(FLOPs / peak, minimum bytes / bandwidth)"),
    Column(key="orojenesis_time_s", label="oro time", role="bound", unit="s",
           help="the Orojenesis traffic at peak bandwidth"),
    Column(key="orojenesis_bytes", label="oro bytes", role="bound", unit="B",
           help="Orojenesis minimum DRAM traffic at the device's on-chip buffer (GEMMs)"),
    Column(key="achieved_flops_s", label="FLOP/s", role="rate", unit="FLOP/s"),
    Column(key="achieved_bytes_s", label="B/s", role="rate", unit="B/s"),
    Column(key="util_compute", label="FLOP util", role="ratio", unit="%",
           help="achieved FLOP/s over the device's peak"),
    Column(key="util_memory", label="mem util", role="ratio", unit="%",
           help="achieved bytes/s over the device's bandwidth"),
]
WHY_COLUMNS = WHY_FIRST + WHY_REST
