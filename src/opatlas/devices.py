"""Device catalog: peak dense FLOP/s per dtype, memory bandwidth, on-chip buffer, memory size,
with the source of each figure. Used by roofline features, hybrid models and bounds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opatlas.errors import OpatlasError

T = 1e12


@dataclass(frozen=True)
class Device:
    name: str
    peak_flops: dict[str, float]   # dense, per dtype
    bandwidth: float               # bytes/s, off-chip memory
    onchip_bytes: float            # last-level on-chip cache/SRAM
    memory_bytes: float
    compute_units: int             # SMs / CUs / Tensix cores (for wave quantisation)
    source: str
    aliases: tuple[str, ...] = field(default=())

    def peak(self, dtype: str) -> float:
        try:
            return self.peak_flops[dtype]
        except KeyError:
            raise OpatlasError(f"device {self.name} has no peak FLOP/s for dtype {dtype!r} "
                               f"(known: {sorted(self.peak_flops)})") from None


GiB, MiB = 2**30, 2**20
DEVICES = {d.name: d for d in (
    Device("A100-SXM4-80GB", {"fp16": 312 * T, "bf16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T,
                              "fp64": 19.5 * T}, 2.039e12, 40 * MiB, 80 * GiB, 108,
           "NVIDIA A100 Tensor Core GPU datasheet (dense Tensor Core peaks; HBM2e 2,039 GB/s)",
           ("NVIDIAA100-SXM4-80GB", "A100")),
    Device("H100-SXM5-80GB", {"fp16": 989.4 * T, "bf16": 989.4 * T, "tf32": 494.7 * T,
                              "fp32": 66.9 * T, "fp8": 1978.9 * T, "fp64": 66.9 * T},
           3.35e12, 50 * MiB, 80 * GiB, 132,
           "NVIDIA H100 Tensor Core GPU datasheet, SXM5 (dense; HBM3 3.35 TB/s)",
           ("NVIDIAH10080GBHBM3", "H100", "NVIDIAH100")),
    Device("H200-SXM-141GB", {"fp16": 989.4 * T, "bf16": 989.4 * T, "tf32": 494.7 * T,
                              "fp32": 66.9 * T, "fp8": 1978.9 * T}, 4.8e12, 50 * MiB, 141e9,
           132, "NVIDIA H200 datasheet (H100 compute; HBM3e 4.8 TB/s, 141 GB)",
           ("NVIDIAH200", "H200")),
    # GH200 reports its name with the Grace memory: 480 GB (LPDDR5X) on most systems, 120 GB
    # on TACC Vista (96 GB HBM3 + 120 GB LPDDR5X per superchip, Vista user guide)
    Device("GH200-96GB", {"fp16": 989.4 * T, "bf16": 989.4 * T, "tf32": 494.7 * T,
                          "fp32": 66.9 * T, "fp8": 1978.9 * T, "fp64": 66.9 * T}, 4.0e12,
           50 * MiB, 96 * GiB, 132,
           "NVIDIA GH200 Grace Hopper Superchip datasheet (H100 compute, dense; 96 GB HBM3 at "
           "4 TB/s); TACC Vista user guide (96 GB HBM3 + 120 GB LPDDR5X)",
           ("NVIDIAGH200480GB", "NVIDIAGH200120GB", "GH200", "GH200-HBM3")),
    Device("GH200-144GB", {"fp16": 989.4 * T, "bf16": 989.4 * T, "tf32": 494.7 * T,
                           "fp32": 66.9 * T, "fp8": 1978.9 * T, "fp64": 66.9 * T}, 4.9e12,
           50 * MiB, 144e9, 132,
           "NVIDIA GH200 Grace Hopper Superchip datasheet, HBM3e version (H100 compute, dense; "
           "144 GB HBM3e at 4.9 TB/s)",
           ("NVIDIAGH200144GHBM3e", "NVIDIAGH200144GBHBM3e", "GH200-HBM3e")),
    Device("B200-SXM-180GB", {"fp16": 2250 * T, "bf16": 2250 * T, "tf32": 1100 * T,
                              "fp8": 4500 * T}, 8.0e12, 126 * MiB, 180e9, 148,
           "NVIDIA HGX B200 / DGX B200 datasheets, per GPU (dense = half the 'with sparsity' "
           "Tensor Core figures: FP16/BF16 36 PF, TF32 18 PF, FP8 72 PF per 8 GPUs); HBM3e "
           "1,440 GB and 64 TB/s per 8 GPUs; 148 SMs (Chips and Cheese, 'Nvidia's B200: Keeping "
           "the CUDA Juggernaut Rolling', 2025); 126 MB L2 (reported in the Blackwell memory-"
           "hierarchy literature; not on NVIDIA's datasheets)", ("NVIDIAB200", "B200")),
    Device("GB200-186GB", {"fp16": 2500 * T, "bf16": 2500 * T, "tf32": 1250 * T,
                           "fp8": 5000 * T}, 8.0e12, 126 * MiB, 186e9, 148,
           "NVIDIA GB200 NVL72 datasheet, per GPU (dense = half the 'with sparsity' Tensor "
           "Core figures: FP16/BF16 360 PF, TF32 180 PF, FP8 720 PF per 72 GPUs); HBM3e "
           "186 GB at 8 TB/s per GPU; SMs and L2 as B200's", ("NVIDIAGB200", "GB200")),
    Device("MI300X", {"fp16": 1307.4 * T, "bf16": 1307.4 * T, "tf32": 653.7 * T,
                      "fp32": 163.4 * T, "fp8": 2614.9 * T}, 5.3e12, 256 * MiB, 192 * GiB, 304,
           "AMD Instinct MI300X data sheet (dense matrix peaks; HBM3 5.3 TB/s; 256 MB Infinity "
           "Cache)", ("AMDInstinctMI300X",)),
    Device("Wormhole-n150", {"fp16": 74 * T, "bf16": 74 * T, "fp8": 262 * T}, 288e9, 108 * MiB,
           12 * GiB, 72, "Tenstorrent Wormhole n150 spec sheet (FP16 74 TFLOPS, FP8 262; "
           "12 GB GDDR6 at 288 GB/s; 72 Tensix cores x 1.5 MB SRAM)", ("n150", "wormhole_b0")),
)}


def find_device(name: str) -> Device | None:
    """The catalog entry whose name or an alias is ``name`` (spaces and case ignored)."""
    key = str(name).replace(" ", "").lower()
    for d in DEVICES.values():
        if key in (n.lower() for n in (d.name, *d.aliases)):
            return d
    return None


def get_device(name: str) -> Device:
    d = find_device(name)
    if d is None:
        raise OpatlasError(f"unknown device {name!r}; known: {', '.join(DEVICES)}")
    return d


def device_key(name: str) -> str:
    """One key per device however it is named: the catalog name for any of its aliases, else
    the name without spaces. Data recorded under any alias is found under this key."""
    d = find_device(name)
    return d.name if d is not None else str(name).replace(" ", "")


def same_device(a: str, b: str) -> bool:
    return device_key(a) == device_key(b)


def empirical_device(name: str, flops: Any, nbytes: Any, seconds: Any,
                     dtype: str) -> Device:
    """A device not in the catalog, described by what its measurements achieved: the best
    FLOP/s and the best bytes/s seen (a roofline that the data itself attains). Its memory
    capacity is unknown (infinite: memory verdicts are not checked against it)."""
    import numpy as np

    ok = np.isfinite(flops) & np.isfinite(nbytes) & (seconds > 0)
    if not ok.any():
        raise OpatlasError(f"device {name!r} is not in the catalog and its data has no FLOP or "
                           f"byte counts to derive a roofline from")
    peak = float(np.max(flops[ok] / seconds[ok]))
    bw = float(np.max(nbytes[ok] / seconds[ok]))
    return Device(name, {dtype: max(peak, 1.0)}, max(bw, 1.0), 0.0, float("inf"), 1,
                  "empirical: best achieved FLOP/s and bytes/s in the measurements")
