"""Measured GPU DRAM traffic of a 4096³ GEMM (the artifact's Fig. 24a), in bytes.

Seed values: CUTLASS sgemm (SIMT) and ``cutlass_tensorop_s1688bf16gemm_256x128_16x3_nn_align4``
measured by the Orojenesis authors with Nsight Compute (``dram__bytes_read.sum +
dram__bytes_write.sum``, ``--cache-control all``); x = the L2 size of each GPU.
Measurements of our own (H100 via PyTorch/cuBLAS, ``scripts/gpu_fig24a.py``) are read from the
package data file ``data/orojenesis/gpu_gemm4096_dram.csv`` (columns: gpu, l2_bytes, kernel,
dtype, dram_bytes, how; others, such as ns and kernel_names, are kept as they are). Both
byte counts are whole numbers of bytes below 2**53, and no point may lie below the bound at
its L2 size: either is an error naming the file, line, column and value.

The bound is counted in words; a point is compared with it in the words its kernel moves
through DRAM (``dtype``): a buffer of L2 bytes holds L2 / word_bytes words, and the bound's
words are word_bytes bytes each (:func:`versus_bound`).
"""

from __future__ import annotations

import csv
import re
import sys
from decimal import Decimal, InvalidOperation
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
TEXT = ("gpu", "kernel", "how")  # dtype is checked against WORD_BYTES
MAX_BYTES = 2**53  # exact in a float64, far above any GPU's L2 or a GEMM's traffic
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
    = "measured", ``word_bytes`` from ``dtype``, and ``file`` and ``line`` (where each row
    came from, for :func:`versus_bound`'s errors) added. A missing packaged file gives an
    empty frame and a note on stderr; a given ``path`` must exist."""
    if path is None:
        path = packaged_measurements()
        if path is None:
            print(f"opatlas: note: no {MEASURED_FILE} in this install; Fig. 24a shows the "
                  f"Orojenesis seed points only", file=sys.stderr)
            return pd.DataFrame(columns=[*COLUMNS, "source", "word_bytes", "file", "line"])
    path = Path(path)
    header, rows, lines = _read_rows(path)
    raw = pd.DataFrame(rows, columns=header, dtype=object)
    raw["line"] = lines
    return _validated(raw, path)


def _read_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """The header, the data rows and each row's line number; every row must have as many
    fields as the header, and no header may repeat (pandas would shift or rename them)."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            rows, lines = [], []
            for row in reader:
                if not any(field.strip() for field in row):
                    continue  # a blank line, as pandas skips it
                rows.append(row)
                lines.append(reader.line_num)
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the GPU measurements: {exc}", file=str(path)) from exc
    if not header:
        raise SpecError("empty file; expected a header with "
                        f"{', '.join(COLUMNS)}", file=str(path))
    header = [h.strip() for h in header]
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise SpecError(f"line 1: column {repeated[0]!r} appears {header.count(repeated[0])} "
                        "times in the header; give each column once", file=str(path),
                        key=repeated[0])
    for row, line in zip(rows, lines, strict=True):
        if len(row) != len(header):
            raise SpecError(f"line {line} has {len(row)} fields, the header has "
                            f"{len(header)}", file=str(path))
    return header, rows, lines


def _validated(raw: pd.DataFrame, path: Path) -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise SpecError(f"missing column(s) {', '.join(missing)}; the file has "
                        f"{', '.join(c for c in raw.columns if c != 'line') or 'none'}",
                        file=str(path), key=missing[0])
    out = raw.copy()
    for col in TEXT:
        for v, line in zip(raw[col], raw["line"], strict=True):
            if not str(v).strip():
                raise SpecError(f"line {line}: empty {col}; every row needs one",
                                file=str(path), key=col, value=v)
    for col in POSITIVE:
        out[col] = [_whole_bytes(v, path, col, line)
                    for v, line in zip(raw[col], raw["line"], strict=True)]
    for dtype, line in zip(raw["dtype"], raw["line"], strict=True):
        if dtype not in WORD_BYTES:
            raise SpecError(f"line {line}: unknown word type; known: "
                            f"{', '.join(WORD_BYTES)}", file=str(path), key="dtype", value=dtype)
    for col in POSITIVE:
        out[col] = out[col].astype("int64")
    out["source"] = "measured"
    out["word_bytes"] = out["dtype"].map(WORD_BYTES).astype("int64")
    out["file"] = str(path)
    return out


def _whole_bytes(text: str, path: Path, col: str, line: int) -> int:
    """``text`` as a whole number of bytes in 1 .. 2**53 - 1 (``,`` and ``_`` separators
    allowed), or an error naming the file, the line, the column and the value."""
    try:
        value = Decimal(str(text).strip().replace(",", "").replace("_", ""))
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value <= 0:
        why = "not a positive number"
    elif value != value.to_integral_value():
        why = "not a whole number of bytes"
    elif value >= MAX_BYTES:
        why = f"not below 2**53 = {MAX_BYTES:,} bytes"
    else:
        return int(value)
    raise SpecError(f"line {line}: {why}", file=str(path), key=col, value=text)


def short_gpu_name(gpu: str) -> str:
    """'H100' for 'NVIDIA H100 80GB HBM3' or 'A100' for 'NVIDIA A100-SXM4-40GB': the seed's
    short names where one fits, else the name without a leading 'NVIDIA'."""
    tokens = re.split(r"[\s\-_]+", gpu.strip())
    known = next((short for short in L2_BYTES if short in tokens), None)
    if known is not None:
        return known
    return re.sub(r"^NVIDIA\s+", "", gpu.strip()) or gpu


def versus_bound(points: pd.DataFrame, bound: Frontier) -> pd.DataFrame:
    """Each point beside the bound at its L2 size, in bytes of its own words.

    ``bound`` is the 4096³ GEMM's frontier in words. A kernel moving w-byte words with an
    L2 of L bytes is held to w·bound(L // w): a 50 MiB L2 holds twice as many 2-byte words as
    4-byte ones. ``compulsory_bytes`` is every operand moved once (w·|A|+|B|+|C|), the floor
    of the bound; ``ratio`` is measured over bound. No kernel moves less than the bound, so a
    point below it is an error (most likely a unit slip, MiB or MB for bytes), named by the
    file and line it came from. ``gpu`` is the short GPU name (H100), ``device`` the name as
    the point gives it."""
    rows = []
    for p in points.to_dict("records"):
        w = int(p["word_bytes"])
        words = int(p["l2_bytes"]) // w
        at = bound.lookup(words)
        if at is None:
            raise SpecError(f"{_where(p)}{p['gpu']} {p['kernel']}: {words:,} words of {w} B "
                            f"is below the bound's smallest buffer ({int(bound.buffer[0]):,} "
                            f"words); l2_bytes is in bytes, not MiB or MB",
                            file=_file(p), key="l2_bytes", value=_number(p["l2_bytes"]))
        if float(p["dram_bytes"]) < at * w:
            raise _below_bound(p, at * w, bound.algo_min * w)
        rows.append({"source": p["source"], "gpu": short_gpu_name(str(p["gpu"])),
                     "device": p["gpu"], "kernel": p["kernel"],
                     "dtype": p["dtype"], "word_bytes": w, "l2_bytes": int(p["l2_bytes"]),
                     "buffer_words": words, "compulsory_bytes": bound.algo_min * w,
                     "bound_bytes": at * w, "dram_bytes": float(p["dram_bytes"]),
                     "ratio": float(p["dram_bytes"]) / (at * w)})
    return pd.DataFrame(rows)


def _file(point: dict) -> str | None:
    f = point.get("file")
    return f if isinstance(f, str) and f else None


def _where(point: dict) -> str:
    """'line N: ' for a point read from a file (a seed point has no line)."""
    line = point.get("line")
    return f"line {int(line)}: " if line is not None and pd.notna(line) else ""


def _number(value: object) -> int | float:
    """A whole number as an int (a concatenated frame may hold it as a float)."""
    v = float(value)
    return int(v) if v.is_integer() else v


def _below_bound(point: dict, bound_bytes: int, compulsory_bytes: int) -> SpecError:
    """The error for a point that moves less than the bound at its L2 size: below even the
    compulsory traffic, dram_bytes is wrong; else the L2 size is too small for it."""
    dram, l2 = float(point["dram_bytes"]), int(point["l2_bytes"])
    said = (f"{dram:,.0f} DRAM bytes at an L2 of {l2:,} bytes is below the bound there "
            f"({bound_bytes:,} bytes; every operand once is {compulsory_bytes:,}), and no "
            f"kernel moves less than the bound")
    if dram < compulsory_bytes:
        key, value, hint = "dram_bytes", _number(dram), "dram_bytes must be in bytes"
    else:
        key, value, hint = "l2_bytes", l2, "l2_bytes must be in bytes"
    return SpecError(f"{_where(point)}{point['gpu']} {point['kernel']}: {said}; {hint}, "
                     f"not MiB or MB (a unit mistake?)", file=_file(point), key=key,
                     value=value)
