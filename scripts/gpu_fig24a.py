"""Fig. 24a on this GPU (issue 18, step 4), run ON a GPU machine with Nsight Compute (``ncu``).

Measures the DRAM bytes read and written by one 4096³ GEMM through PyTorch/cuBLAS, the way the
Orojenesis artifact measured its CUTLASS kernels (``dram__bytes_read.sum`` +
``dram__bytes_write.sum``, caches flushed before the kernel: ``--cache-control all``), for
three kernels: fp32 on the SIMT cores (TF32 off), fp32 data on the tensor cores (TF32), and bf16
on the tensor cores. Writes ``gpu_gemm4096_dram.csv`` (the columns of
``opatlas.bounds.gpu_data.measured_points``) and ncu's raw CSV into OUTDIR. Never estimates:
where ncu is missing or fails, it says so and writes no row.

    python3 scripts/gpu_fig24a.py OUTDIR
"""

from __future__ import annotations

import argparse
import csv
import glob
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

N = 4096
KINDS = {  # name: (torch dtype, allow TF32, the dtype of the words in DRAM)
    "simt": ("float32", False, "fp32"),
    "tf32": ("float32", True, "fp32"),
    "bf16": ("bfloat16", False, "bf16"),
}
# kernels that make the inputs, not the product
NOT_GEMM = re.compile(r"distribution|elementwise|fill|normal|uniform|copy", re.I)


def run_gemm(kind: str) -> None:
    """The profiled program: make A and B, then one product (the last kernels launched)."""
    import torch

    dtype, tf32, _ = KINDS[kind]
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.rand(N, N, device="cuda", dtype=getattr(torch, dtype))
    b = torch.rand(N, N, device="cuda", dtype=getattr(torch, dtype))
    torch.cuda.synchronize()
    c = a @ b
    torch.cuda.synchronize()
    del c


def find_ncu() -> str | None:
    return shutil.which("ncu") or next(iter(sorted(
        glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda*/bin/ncu"))),
        None)


def profile(ncu: str, kind: str, outdir: Path) -> list[dict[str, str]]:
    cmd = [ncu, "--csv", "--print-units", "base", "--cache-control", "all", "--clock-control",
           "none", "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum",
           sys.executable, __file__, "--run", kind]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (outdir / f"ncu_{kind}.csv").write_text(proc.stdout + proc.stderr)
    lines = proc.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if proc.returncode != 0 or start is None:
        print(f"{kind}: ncu failed (rc {proc.returncode}): {proc.stderr.strip()[-400:]}")
        return []
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def gemm_bytes(rows: list[dict[str, str]]) -> tuple[float, float, list[str]]:
    """(bytes read + written, ns) summed over the product's kernels, and their names."""
    total, ns, names = 0.0, 0.0, []
    for r in rows:
        if NOT_GEMM.search(r["Kernel Name"]):
            continue
        value = float(r["Metric Value"].replace(",", ""))
        if r["Metric Name"].startswith("dram__bytes"):
            total += value
        elif r["Metric Name"] == "gpu__time_duration.sum":
            ns += value
            names.append(r["Kernel Name"])
    return total, ns, names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path, nargs="?")
    ap.add_argument("--run", choices=sorted(KINDS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return run_gemm(args.run)
    import torch

    ncu = find_ncu()
    if ncu is None:
        sys.exit("ncu (Nsight Compute) is not on this machine: Fig. 24a not measured")
    args.outdir.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    gpu = torch.cuda.get_device_name(0)
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout
    rows = []
    for kind, (_, _, word) in KINDS.items():
        total, ns, names = gemm_bytes(profile(ncu, kind, args.outdir))
        if not names:
            continue
        print(f"{kind}: {total / 2**20:.1f} MiB DRAM, {ns / 1e3:.0f} µs, kernels {names}")
        rows.append({"gpu": gpu, "l2_bytes": props.L2_cache_size, "kernel": kind, "dtype": word,
                     "dram_bytes": int(total), "ns": int(ns), "kernel_names": " + ".join(names),
                     "how": f"PyTorch {torch.__version__} cuBLAS, Nsight Compute "
                            f"{version.strip().splitlines()[-1]} (--cache-control all)"})
    with (args.outdir / "gpu_gemm4096_dram.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["gpu", "l2_bytes", "kernel", "dtype", "dram_bytes",
                                          "ns", "kernel_names", "how"])
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
