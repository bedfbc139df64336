"""Collectives over ``torch.distributed`` (NCCL on GPUs, gloo on CPUs), launched with torchrun.

Every rank times every repeat; the recorded sample is the slowest rank's time (an all-reduce
MAX of the per-rank durations), because a collective finishes when its last rank does. Sizes
follow nccl-tests: ``elements`` is the total buffer (the output of all_gather, the input of
reduce_scatter, each rank's buffer for all_reduce and all_to_all, the message for send/recv).
Bandwidths use nccl-tests' formulas (``doc/PERFORMANCE.md``): algbw = bytes / time and
busbw = algbw × factor, with factor 2(n−1)/n for all_reduce, (n−1)/n for all_gather,
reduce_scatter and all_to_all, 1 for send/recv. A bus bandwidth above the link's peak is
physically impossible: such a sample is flagged ``invalid``, not stored as truth.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from opatlas.errors import OpatlasError
from opatlas.ops.base import dtype_bytes

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def bus_factor(op: str, world: int) -> float:
    if op == "all_reduce":
        return 2.0 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (world - 1) / world
    if op == "send_recv":
        return 1.0
    raise OpatlasError(f"unknown collective {op!r}; one of {', '.join(COLLECTIVES)}")


def bandwidths(op: str, nbytes: float, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes per second."""
    alg = nbytes / seconds
    return alg, alg * bus_factor(op, world)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_collective(op: str, sizes: Sequence[int], nproc: int, *, backend: str = "gloo",
                   dtype: str = "fp32", repeats: int = 10, warmup: int = 3,
                   link_peak_gbps: float | None = None, timeout_s: float = 600) -> pd.DataFrame:
    """Launch ``nproc`` ranks with torchrun on this node and measure ``op`` at each size."""
    bus_factor(op, max(nproc, 2))
    if nproc < 2:
        raise OpatlasError("a collective needs at least 2 processes (--nproc)")
    for n in sizes:
        if n < nproc or n % nproc:
            raise OpatlasError(f"size {n} must be a positive multiple of the {nproc} ranks")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "samples.jsonl"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
               "--master-port", str(_free_port()), "-m", "opatlas.ops.collective_worker",
               "--op", op, "--sizes", ",".join(map(str, sizes)), "--backend", backend,
               "--dtype", dtype, "--repeats", str(repeats), "--warmup", str(warmup),
               "--out", str(out)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        if proc.returncode != 0 or not out.exists():
            raise OpatlasError(f"torchrun {op} on {nproc} ranks failed (exit {proc.returncode}):"
                               f"\n{proc.stderr[-2000:]}")
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    return summarize_samples(rows, link_peak_gbps)


def summarize_samples(rows: list[dict], link_peak_gbps: float | None = None) -> pd.DataFrame:
    out = []
    for r in rows:
        med = float(np.median(r["samples_ns"]))
        alg, bus = bandwidths(r["op"], r["bytes"], med / 1e9, r["world_size"])
        above = link_peak_gbps is not None and bus / 1e9 > link_peak_gbps
        status = "ok" if r["correct"] and not above else ("invalid" if above else "error")
        message = r.get("message", "")
        if above:
            message = (f"bus bandwidth {bus / 1e9:.3g} GB/s above the link peak "
                       f"{link_peak_gbps:g} GB/s: not a trustworthy measurement")
        out.append({**{k: r[k] for k in ("op", "elements", "bytes", "world_size", "dtype",
                                         "backend", "samples_ns")},
                    "median_ns": med, "algbw_GBps": alg / 1e9, "busbw_GBps": bus / 1e9,
                    "status": status, "message": message})
    return pd.DataFrame(out)


def record(store: object, df: pd.DataFrame, device: str) -> int:
    """Store the collective samples as results (op ``collective.<name>``, pass ``step``)."""
    from opatlas.run.stats import summarize
    from opatlas.store import ResultRow
    from opatlas.sweep import params_json, vector_id

    rows = []
    for r in df.to_dict("records"):
        params = {"elements": int(r["elements"]), "world_size": int(r["world_size"]), "nodes": 1,
                  "dtype": r["dtype"]}
        op = f"collective.{r['op']}"
        stats = summarize(r["samples_ns"]) if r["status"] == "ok" else {}
        rows.append(ResultRow(
            vector_id=vector_id(op, params), op=op, params_json=params_json(params), pass_="step",
            backend=r["backend"], device=device, dtype=r["dtype"], status=r["status"],
            repeats=len(r["samples_ns"]), min_bytes=float(r["bytes"]), message=r["message"],
            **stats))
    return store.add_results(rows)  # type: ignore[attr-defined]


def element_bytes(dtype: str) -> int:
    return dtype_bytes(dtype)
