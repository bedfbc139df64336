"""Why a row takes its time: achieved FLOP/s and bytes/s against the device's peaks, the roofline
time, the Orojenesis minimum DRAM traffic of GEMM-like ops at the device's on-chip buffer, the
bound (the largest of these times), the headroom (time / bound) and the limiter.

Every source computes its rows' FLOPs, bytes and GEMM dimensions its own way, then calls
:func:`explain` once on the whole table (vectorised but for one frontier per distinct GEMM)."""

from __future__ import annotations

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


@dataclass(frozen=True)
class Peaks:
    """The device the rows ran (or would run) on."""

    name: str
    flops_s: float  # dense peak at the rows' dtype
    bytes_s: float  # off-chip memory bandwidth
    onchip_bytes: float  # the on-chip buffer the Orojenesis bound assumes (0: none known)
    word_bytes: int = 2


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
    r["util_memory"] = np.where(kernel_row, r["achieved_bytes_s"] / peaks.bytes_s, np.nan)
    compute_s = np.where(kernel_row, flops / peaks.flops_s, np.nan)
    memory_s = np.where(kernel_row, nbytes / peaks.bytes_s, np.nan)
    r["roofline_time_s"] = np.fmax(compute_s, memory_s)
    gemms = r["gemms"].tolist() if "gemms" in r else [None] * len(r)
    oro = orojenesis_bytes([g if k else None for g, k in zip(gemms, kernel_row, strict=True)],
                           peaks) * calls
    r["orojenesis_bytes"] = oro
    r["orojenesis_time_s"] = oro / peaks.bytes_s
    bound = np.fmax(r["roofline_time_s"].to_numpy(float), r["orojenesis_time_s"].to_numpy(float))
    comm = (pd.to_numeric(r["comm_bound_s"], errors="coerce").to_numpy(float)
            if "comm_bound_s" in r else np.full(len(r), np.nan))
    bound = np.where(np.isfinite(comm), comm, bound)
    bound = np.where(bound > 0, bound, np.nan)
    r["bound_time_s"] = bound
    with np.errstate(divide="ignore", invalid="ignore"):
        r["headroom"] = t / bound
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
    return r.drop(columns=[c for c in ("gemms", "comm_bound_s") if c in r])


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
