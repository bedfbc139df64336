"""Roofline bounds per op: time ≥ max(FLOPs / peak FLOP/s, bytes / bandwidth); with an Einsum,
the bytes come from its data-movement bound at the device's on-chip capacity."""

from __future__ import annotations

from dataclasses import dataclass

from opatlas.bounds.einsum import Einsum
from opatlas.bounds.frontier import frontier


@dataclass(frozen=True)
class RooflineBound:
    compute_s: float
    memory_s: float
    bytes: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bottleneck(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def roofline(flops: float, bytes_: float, peak_flops: float, bandwidth: float) -> RooflineBound:
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError("peak FLOP/s and bandwidth must be positive")
    return RooflineBound(flops / peak_flops, bytes_ / bandwidth, bytes_)


def einsum_roofline(einsum: Einsum, onchip_bytes: float, peak_flops: float,
                    bandwidth: float) -> RooflineBound:
    """The fastest an Einsum can run when ``onchip_bytes`` of buffer hide what they can: the
    traffic is the Orojenesis bound at that capacity (3·MACs words if below every mapping)."""
    f = frontier(einsum)
    words = f.lookup(onchip_bytes / einsum.word_bytes)
    traffic = (f.algo_max if words is None else words) * einsum.word_bytes
    return roofline(2.0 * einsum.macs, traffic, peak_flops, bandwidth)
