"""Measured GPU DRAM traffic of a 4096³ GEMM (the artifact's Fig. 24a), in bytes.

Seed values: CUTLASS sgemm (SIMT) and ``cutlass_tensorop_s1688bf16gemm_256x128_16x3_nn_align4``
measured by the Orojenesis authors with Nsight Compute (``dram__bytes_read.sum +
dram__bytes_write.sum``, ``--cache-control all``); x = the L2 size of each GPU.
Measurements of our own (H100 via PyTorch/cuBLAS, ``scripts/gpu_fig24a.py``) are read from the
package data file ``data/orojenesis/gpu_gemm4096_dram.csv`` (columns: gpu, l2_bytes, kernel,
dtype, dram_bytes, how; others, such as ns and kernel_names, are kept as they are).

The bound is counted in words; a point is compared with it in the words its kernel moves
through DRAM (``dtype``): a buffer of L2 bytes holds L2 / word_bytes words, and the bound's
words are word_bytes bytes each (:func:`versus_bound`).
"""

from __future__ import annotations

import math
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from opatlas.errors import SpecError

if TYPE_CHECKING:
    from opatlas.bounds.frontier import Frontier

MiB, GiB = 2**20, 2**30
L2_BYTES = {"A2": 2 * MiB, "A30": 24 * MiB, "A100": 40 * MiB, "H100": 50 * MiB}
SEED_SIMT = {"A2": 2.69 * GiB, "A30": 650 * MiB, "A100": 533 * MiB, "H100": 373.39 * MiB}
SEED_TENSOR = {"A2": 1.58 * GiB, "A30": 561.51 * MiB, "A100": 411.06 * MiB, "H100": 373.33 * MiB}

# bytes of one word in DRAM for each ``dtype`` of the data file (tf32 kernels keep fp32 words)
WORD_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
COLUMNS = ("gpu", "l2_bytes", "kernel", "dtype", "dram_bytes", "how")
POSITIVE = ("l2_bytes", "dram_bytes")
MEASURED_FILE = "gpu_gemm4096_dram.csv"


def seed_points() -> pd.DataFrame:
    """The Orojenesis authors' CUTLASS measurements (fp32 words in DRAM for both kernels)."""
    rows = [{"gpu": g, "l2_bytes": L2_BYTES[g], "kernel": k, "dtype": "fp32", "dram_bytes": v,
             "how": "Orojenesis artifact (CUTLASS, Nsight Compute)", "source": "seed",
             "word_bytes": 4}
            for k, table in (("simt", SEED_SIMT), ("tensor", SEED_TENSOR)) for g, v in table.items()]
    return pd.DataFrame(rows)


def packaged_measurements() -> Path | None:
    """The package's own measurement file, or None when this install lacks it."""
    f = resources.files("opatlas") / "data" / "orojenesis" / MEASURED_FILE
    return Path(str(f)) if f.is_file() else None


def measured_points(path: Path | None = None) -> pd.DataFrame:
    """Our own measurements (``path``, else the packaged file), validated, with ``source``
    = "measured" and ``word_bytes`` from ``dtype`` added. A missing packaged file gives an
    empty frame and a note on stderr; a given ``path`` must exist."""
    if path is None:
        path = packaged_measurements()
        if path is None:
            print(f"opatlas: note: no {MEASURED_FILE} in this install; Fig. 24a shows the "
                  f"Orojenesis seed points only", file=sys.stderr)
            return pd.DataFrame(columns=[*COLUMNS, "source", "word_bytes"])
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the GPU measurements: {exc}", file=str(path)) from exc
    return _validated(raw, Path(path))


def _validated(raw: pd.DataFrame, path: Path) -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise SpecError(f"missing column(s) {', '.join(missing)}; the file has "
                        f"{', '.join(raw.columns) or 'none'}", file=str(path), key=missing[0])
    out = raw.copy()
    for col in POSITIVE:
        out[col] = [_positive(v, path, col, i) for i, v in enumerate(raw[col])]
    for i, (dtype, kernel, gpu) in enumerate(zip(raw["dtype"], raw["kernel"], raw["gpu"],
                                                 strict=True)):
        if dtype not in WORD_BYTES:
            raise SpecError(f"line {i + 2}: unknown word type; known: "
                            f"{', '.join(WORD_BYTES)}", file=str(path), key="dtype", value=dtype)
        if not kernel.strip() or not gpu.strip():
            raise SpecError(f"line {i + 2}: empty gpu or kernel name", file=str(path),
                            key="kernel" if not kernel.strip() else "gpu", value="")
    out["l2_bytes"] = out["l2_bytes"].astype("int64")
    out["source"] = "measured"
    out["word_bytes"] = out["dtype"].map(WORD_BYTES).astype("int64")
    return out


def _positive(text: str, path: Path, col: str, row: int) -> float:
    """``text`` as a positive finite number, or an error naming the file, column and line."""
    try:
        value = float(str(text).replace(",", "").replace("_", ""))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"line {row + 2}: not a positive number", file=str(path), key=col,
                        value=text)
    return value


def versus_bound(points: pd.DataFrame, bound: Frontier) -> pd.DataFrame:
    """Each point beside the bound at its L2 size, in bytes of its own words.

    ``bound`` is the 4096³ GEMM's frontier in words. A kernel moving w-byte words with an
    L2 of L bytes is held to w·bound(L // w): a 50 MiB L2 holds twice as many 2-byte words as
    4-byte ones. ``compulsory_bytes`` is every operand moved once (w·|A|+|B|+|C|), the floor
    of the bound; ``ratio`` is measured over bound (≥ 1 for any real kernel)."""
    rows = []
    for p in points.to_dict("records"):
        w = int(p["word_bytes"])
        words = int(p["l2_bytes"]) // w
        at = bound.lookup(words)
        if at is None:
            raise SpecError(f"{p['gpu']} {p['kernel']}: {words:,} words of {w} B is below the "
                            f"bound's smallest buffer ({int(bound.buffer[0]):,})", key="l2_bytes",
                            value=p["l2_bytes"])
        rows.append({"source": p["source"], "gpu": p["gpu"], "kernel": p["kernel"],
                     "dtype": p["dtype"], "word_bytes": w, "l2_bytes": int(p["l2_bytes"]),
                     "buffer_words": words, "compulsory_bytes": bound.algo_min * w,
                     "bound_bytes": at * w, "dram_bytes": float(p["dram_bytes"]),
                     "ratio": float(p["dram_bytes"]) / (at * w)})
    return pd.DataFrame(rows)
