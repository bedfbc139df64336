"""Measured GPU DRAM traffic of a 4096³ fp32 GEMM (the artifact's Fig. 24a), in bytes.

Seed values: CUTLASS sgemm (SIMT) and ``cutlass_tensorop_s1688bf16gemm_256x128_16x3_nn_align4``
measured by the Orojenesis authors with Nsight Compute (``dram__bytes_read.sum +
dram__bytes_write.sum``, ``--cache-control all``); x = the L2 size of each GPU.
Measurements of our own (H100 via PyTorch/cuBLAS) are read from the package data file
``data/orojenesis/gpu_gemm4096_dram.csv`` when it exists (columns: gpu, l2_bytes, kernel,
dtype, dram_bytes, how).
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

MiB, GiB = 2**20, 2**30
L2_BYTES = {"A2": 2 * MiB, "A30": 24 * MiB, "A100": 40 * MiB, "H100": 50 * MiB}
SEED_SIMT = {"A2": 2.69 * GiB, "A30": 650 * MiB, "A100": 533 * MiB, "H100": 373.39 * MiB}
SEED_TENSOR = {"A2": 1.58 * GiB, "A30": 561.51 * MiB, "A100": 411.06 * MiB, "H100": 373.33 * MiB}


def seed_points() -> pd.DataFrame:
    rows = [{"gpu": g, "l2_bytes": L2_BYTES[g], "kernel": k, "dtype": "fp32", "dram_bytes": v,
             "how": "Orojenesis artifact (CUTLASS, Nsight Compute)"}
            for k, table in (("simt", SEED_SIMT), ("tensor", SEED_TENSOR)) for g, v in table.items()]
    return pd.DataFrame(rows)


def measured_points() -> pd.DataFrame:
    f = resources.files("opatlas") / "data" / "orojenesis" / "gpu_gemm4096_dram.csv"
    if not f.is_file():
        return pd.DataFrame(columns=["gpu", "l2_bytes", "kernel", "dtype", "dram_bytes", "how"])
    return pd.read_csv(str(f))
