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
            raise OpatlasError(_no_peak(self, dtype)) from None


def _no_peak(device: Device, dtype: str) -> str:
    """The one-line error for a dtype ``device`` has no peak for: the dtypes it has and the
    catalog devices that have one for ``dtype``, the two ways out."""
    others = [d.name for d in DEVICES.values() if dtype in d.peak_flops]
    where = (f"or name a device with a {dtype} peak ({', '.join(others)})" if others
             else f"no catalog device has a {dtype} peak")
    return (f"device {device.name} has no peak FLOP/s for dtype {dtype!r}; it has "
            f"{', '.join(sorted(device.peak_flops))}: use data in one of those, {where}")


GiB, MiB = 2**30, 2**20

# ---- Tenstorrent Tensix cores: the one source of their compute peaks (the catalog's entry
# below, PyBuda's theoretical matmul cycles and the PyBuda analysis's peak all derive from it)
# Dense FLOP per cycle of one core's FPU (matrix engine) at LoFi, one fidelity phase. Wormhole:
# an 8x16 by 16x16 product a cycle, 2*8*16*16 = 4096 FLOP, "4 TFLOPS per matrix engine" at
# 1 GHz (tt-metal, tech_reports/matrix_engine/matrix_engine.md). PyBuda's theoretical matmul
# cycles agree: 16 cycles per 32x32x32 tile product and phase on Wormhole (2*32**3/16 = 4096)
# and 32 on Grayskull (2048), "based on max throughput for the chip" (tt-buda,
# pybuda/pybuda/op/eval/buda/matmul.py).
TENSIX_FLOP_PER_CYCLE = {"wormhole": 4096, "grayskull": 2048}
# Math fidelity: how many passes the 5x7-bit multipliers make over the operands' mantissas;
# the rate is the LoFi rate over the phases (same tech report: LoFi 4, HiFi2 2, HiFi3 1.33,
# HiFi4 1 TFLOPS a core). The data format does not enter the rate: it only decides how many
# phases reach its full precision, and a netlist states the fidelity each op runs at.
FIDELITY_PHASES = {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}
TILE_FLOP = 2 * 32**3  # one 32x32 by 32x32 tile product
# The Wormhole n150 card sheet (docs.tenstorrent.com/aibs/wormhole/specifications.html: 72
# Tensix cores, AI clock 1 GHz) quotes each format at a fidelity: FP16 74 TFLOP/s = 72 x 1 GHz
# x 4096/4 (HiFi4, 73.7), BLOCKFP8 148 = 4096/2 (HiFi2, 147.5), FP8 262 at LoFi, which is 8/9
# of the FPU's 4096 a cycle (294.9; tt-perf-report, too, calls its 262/72 LoFi figure
# empirical). A bound must hold whatever a kernel reaches: the catalog takes the FPU's rate.
CARD_FORMAT_FIDELITY = {"fp16": "HiFi4", "bf16": "HiFi4", "bfp8": "HiFi2", "fp8": "LoFi"}
N150_CORES, N150_CLOCK_HZ = 72, 1e9


def tensix_flop_per_cycle(arch: str, fidelity: str = "LoFi") -> float:
    """Dense FLOP per cycle of one Tensix core of ``arch`` (a netlist's: wormhole_b0,
    grayskull ...) at ``fidelity``: the FPU's LoFi rate over the fidelity's phases."""
    base = next((v for k, v in TENSIX_FLOP_PER_CYCLE.items() if arch.lower().startswith(k)),
                None)
    if base is None:
        raise OpatlasError(f"no Tensix compute rate for arch {arch!r} (known: "
                           f"{', '.join(TENSIX_FLOP_PER_CYCLE)})")
    if fidelity not in FIDELITY_PHASES:
        raise OpatlasError(f"unknown math fidelity {fidelity!r} (known: "
                           f"{', '.join(FIDELITY_PHASES)})")
    return base / FIDELITY_PHASES[fidelity]


def tensix_peaks(arch: str, cores: int, clock_hz: float) -> dict[str, float]:
    """Peak FLOP/s per card format (:data:`CARD_FORMAT_FIDELITY`) of ``cores`` cores."""
    return {dtype: cores * clock_hz * tensix_flop_per_cycle(arch, fid)
            for dtype, fid in CARD_FORMAT_FIDELITY.items()}


# ---- Memory sizes: every entry is its datasheet's nominal "GB" taken as GiB (NVIDIA's and
# AMD's HBM "GB" is binary). What nvidia-smi reports as memory.total is that less under 1 GiB,
# and 6-7% above the decimal reading (141e9 B would be 131.3 GiB): A100 80GB 81920 MiB (80.0
# GiB), H100 80GB 81559 MiB (79.6), GH200 96GB 97871 MiB (95.6), H200 141GB 143771 MiB
# (140.4), GH200 144GB 146831 MiB (143.4), B200 180GB 183359 MiB (179.1), GB200 186GB 189471
# MiB (185.0); nvidia-smi outputs published on GitHub for each card.
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
                              "fp32": 66.9 * T, "fp8": 1978.9 * T, "fp64": 66.9 * T}, 4.8e12,
           50 * MiB, 141 * GiB, 132,
           "NVIDIA H200 datasheet (H100 compute, dense; FP64 Tensor Core 67 TF; HBM3e 4.8 "
           "TB/s, 141 GB)",
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
           50 * MiB, 144 * GiB, 132,
           "NVIDIA GH200 Grace Hopper Superchip datasheet, HBM3e version (H100 compute, dense; "
           "144 GB HBM3e at 4.9 TB/s)",
           ("NVIDIAGH200144GHBM3e", "NVIDIAGH200144GBHBM3e", "GH200-HBM3e")),
    Device("B200-SXM-180GB", {"fp16": 2250 * T, "bf16": 2250 * T, "tf32": 1100 * T,
                              "fp8": 4500 * T, "fp32": 75 * T, "fp64": 37 * T}, 8.0e12,
           126 * MiB, 180 * GiB, 148,
           "NVIDIA HGX B200 / DGX B200 datasheets, per GPU (dense = half the 'with sparsity' "
           "Tensor Core figures: FP16/BF16 36 PF, TF32 18 PF, FP8 72 PF per 8 GPUs; FP32 75 TF "
           "and FP64/FP64 Tensor Core 37 TF per GPU); HBM3e "
           "1,440 GB and 64 TB/s per 8 GPUs; 148 SMs (Chips and Cheese, 'Nvidia's B200: Keeping "
           "the CUDA Juggernaut Rolling', 2025); 126 MB L2 (reported in the Blackwell memory-"
           "hierarchy literature; not on NVIDIA's datasheets)", ("NVIDIAB200", "B200")),
    Device("GB200-186GB", {"fp16": 2500 * T, "bf16": 2500 * T, "tf32": 1250 * T,
                           "fp8": 5000 * T, "fp32": 80 * T, "fp64": 40 * T}, 8.0e12,
           126 * MiB, 186 * GiB, 148,
           "NVIDIA GB200 NVL72 datasheet, per GPU (dense = half the 'with sparsity' Tensor "
           "Core figures: FP16/BF16 360 PF, TF32 180 PF, FP8 720 PF per 72 GPUs; FP32 80 TF "
           "and FP64/FP64 Tensor Core 40 TF per GPU); HBM3e "
           "186 GB at 8 TB/s per GPU; SMs and L2 as B200's", ("NVIDIAGB200", "GB200")),
    Device("MI300X", {"fp16": 1307.4 * T, "bf16": 1307.4 * T, "tf32": 653.7 * T,
                      "fp32": 163.4 * T, "fp8": 2614.9 * T, "fp64": 163.4 * T}, 5.3e12,
           256 * MiB, 192 * GiB, 304,
           "AMD Instinct MI300X data sheet (dense matrix peaks, FP64 matrix 163.4 TF; HBM3 "
           "5.3 TB/s; 256 MB Infinity Cache)", ("AMDInstinctMI300X",)),
    Device("Wormhole-n150", tensix_peaks("wormhole", N150_CORES, N150_CLOCK_HZ), 288e9,
           108 * MiB, 12 * GiB, N150_CORES,
           "Tenstorrent Wormhole n150 spec sheet (72 Tensix cores x 1.5 MB SRAM, AI clock 1 GHz, "
           "12 GB GDDR6 at 288 GB/s); peaks from the Tensix FPU's 4096 FLOP/cycle over the "
           "fidelity phases each format is quoted at (FP16/BF16 HiFi4 73.7 TFLOP/s, sheet 74; "
           "BLOCKFP8 HiFi2 147.5, sheet 148; FP8 LoFi 294.9, sheet 262)",
           ("n150", "wormhole_b0")),
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
