"""Collectives over ``torch.distributed`` (NCCL on GPUs, gloo on CPUs), launched with torchrun.

Every rank times every repeat; the recorded sample is the slowest rank's time (an all-reduce
MAX of the per-rank durations), because a collective finishes when its last rank does. Sizes
follow nccl-tests: ``elements`` is the total buffer (the output of all_gather, the input of
reduce_scatter, each rank's buffer for all_reduce and all_to_all, the message for send/recv).
Bandwidths use nccl-tests' formulas (``doc/PERFORMANCE.md``): algbw = bytes / time and
busbw = algbw × factor, with factor 2(n−1)/n for all_reduce, (n−1)/n for all_gather,
reduce_scatter and all_to_all, 1 for send/recv. A bus bandwidth above the link's peak is
physically impossible: such a sample is flagged ``invalid``, not stored as truth.

Several collectives share one launch (:func:`run_collectives`): the ranks start once, then
measure every (op, size) in turn, since starting them (each importing torch) costs seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from opatlas.errors import OpatlasError
from opatlas.ops.base import dtype_bytes

if TYPE_CHECKING:
    from opatlas.store import ResultRow

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


SAMPLES = "samples.jsonl"  # collective_worker.SAMPLES: a line per (op, size), written as it ends
PER_RANK = ("all_gather", "reduce_scatter", "all_to_all")  # split evenly over the ranks
DEFAULT_TIMEOUT_S = 600.0


class CollectiveFailed(OpatlasError):
    """torchrun failed or ran out of time; ``partial`` holds the (op, size)s measured before."""

    def __init__(self, message: str, partial: pd.DataFrame) -> None:
        super().__init__(message)
        self.partial = partial


class CollectiveInterrupted(KeyboardInterrupt):
    """Ctrl-C while the ranks ran (they are stopped); ``partial`` as in :class:`CollectiveFailed`."""

    def __init__(self, partial: pd.DataFrame) -> None:
        super().__init__()
        self.partial = partial


def plan_sizes(op: str, sizes: Sequence[int], nproc: int) -> tuple[list[int], list[str]]:
    """The sizes (total elements) to measure, each once, and a note per change made.

    As nccl-tests: all_reduce and send_recv take any count; all_gather, reduce_scatter and
    all_to_all split the buffer evenly, so a size is rounded down to a multiple of the ranks
    (nccl-tests' count per rank = total / nranks), and one under a single element per rank is
    refused."""
    planned: list[int] = []
    notes: list[str] = []
    for n in sizes:
        if n <= 0:
            raise OpatlasError(f"--sizes {n}: a size is a count of elements, > 0")
        m = n
        if op in PER_RANK:
            if n < nproc:
                raise OpatlasError(f"--sizes {n}: {op} splits the buffer over the {nproc} ranks "
                                   f"(--nproc) and needs at least one element per rank")
            m = n - n % nproc
            if m != n:
                notes.append(f"--sizes {n}: {op} on {nproc} ranks measures {m} elements "
                             f"({m // nproc} per rank)")
        if m in planned:
            notes.append(f"--sizes {n}: {m} elements are on the list already; measured once")
            continue
        planned.append(m)
    return planned, notes


def buffer_bytes(op: str, elements: int, world: int, dtype: str) -> int:
    """The bytes one rank of ``collective_worker`` allocates for ``op`` (inputs, outputs and
    the expected result it checks against)."""
    per_rank = elements // world
    counts = {"all_reduce": elements, "all_gather": 2 * elements + per_rank,
              "reduce_scatter": elements + per_rank, "all_to_all": 3 * elements,
              "send_recv": elements}
    return counts[op] * dtype_bytes(dtype)


def _bytes(nbytes: float) -> str:
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def available_memory(backend: str, nproc: int) -> tuple[int, str, bool]:
    """(bytes, what they are, whether they are per rank): the RAM available to all the gloo
    ranks together, or the smallest GPU's memory for nccl's one GPU per rank. Neither starts
    a CUDA context."""
    if backend == "nccl":
        import torch

        total = min(torch.cuda.get_device_properties(i).total_memory for i in range(nproc))
        return int(total), "memory of the smallest of its GPUs", True
    import psutil

    return int(psutil.virtual_memory().available), "RAM available on this node", False


def check_memory(op: str, sizes: Sequence[int], nproc: int, dtype: str, backend: str) -> None:
    """Refuse a size whose buffers cannot fit, before launching ranks that would die on it."""
    if not sizes:
        return
    avail, what, per_rank = available_memory(backend, nproc)
    for n in sizes:
        one = buffer_bytes(op, n, nproc, dtype)
        need = one if per_rank else one * nproc
        if need > avail:
            ranks = "each rank" if per_rank else f"{nproc} ranks × {_bytes(one)}"
            raise OpatlasError(f"--sizes {n}: {op} ({dtype}) needs {_bytes(need)} of buffers "
                               f"({ranks}), more than the {_bytes(avail)} {what}")


def _torchrun_cmd(plan: Mapping[str, Sequence[int]], nproc: int, backend: str, dtype: str,
                  repeats: int, warmup: int, folder: Path) -> list[str]:
    pairs = [arg for op, sizes in plan.items()
             for arg in ("--op", op, "--sizes", ",".join(map(str, sizes)))]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
            "--master-port", str(_free_port()), "-m", "opatlas.ops.collective_worker",
            *pairs, "--backend", backend, "--dtype", dtype, "--repeats", str(repeats),
            "--warmup", str(warmup), "--out", str(folder)]


def run_collective(op: str, sizes: Sequence[int], nproc: int, *, backend: str = "gloo",
                   dtype: str = "fp32", repeats: int = 10, warmup: int = 3,
                   link_peak_gbps: float | None = None,
                   timeout_s: float = DEFAULT_TIMEOUT_S) -> pd.DataFrame:
    """Launch ``nproc`` ranks with torchrun on this node and measure ``op`` at each size
    (:func:`plan_sizes`: rounded down where the collective splits it, each once).

    A failure raises :class:`CollectiveFailed` naming the first rank's own exception, a
    timeout the same, Ctrl-C :class:`CollectiveInterrupted`; each carries the sizes measured
    before it (``partial``)."""
    return run_collectives({op: sizes}, nproc, backend=backend, dtype=dtype, repeats=repeats,
                           warmup=warmup, link_peak_gbps=link_peak_gbps, timeout_s=timeout_s)


def run_collectives(plan: Mapping[str, Sequence[int]], nproc: int, *, backend: str = "gloo",
                    dtype: str = "fp32", repeats: int = 10, warmup: int = 3,
                    link_peak_gbps: float | None = None,
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> pd.DataFrame:
    """:func:`run_collective` for several collectives (op -> sizes), in ONE torchrun launch:
    each op's sizes are planned and checked against memory first, then every (op, size) is
    measured in turn, in the plan's order; ``timeout_s`` covers them all."""
    if not plan:
        raise OpatlasError(f"no collective given; one of {', '.join(COLLECTIVES)}")
    for op in plan:
        bus_factor(op, max(nproc, 2))
    if nproc < 2:
        raise OpatlasError("a collective needs at least 2 processes (--nproc)")
    if empty := [op for op, sizes in plan.items() if not sizes]:
        raise OpatlasError(f"{', '.join(empty)}: no size to measure")
    planned = {op: plan_sizes(op, sizes, nproc)[0] for op, sizes in plan.items()}
    for op, sizes in planned.items():
        check_memory(op, sizes, nproc, dtype, backend)
    return measure_plan(planned, nproc, backend=backend, dtype=dtype, repeats=repeats,
                        warmup=warmup, link_peak_gbps=link_peak_gbps, timeout_s=timeout_s)


def measure(op: str, sizes: Sequence[int], nproc: int, *, backend: str, dtype: str,
            repeats: int, warmup: int, link_peak_gbps: float | None,
            timeout_s: float) -> pd.DataFrame:
    """:func:`run_collective` on sizes taken as they are (no check)."""
    return measure_plan({op: sizes}, nproc, backend=backend, dtype=dtype, repeats=repeats,
                        warmup=warmup, link_peak_gbps=link_peak_gbps, timeout_s=timeout_s)


def measure_plan(plan: Mapping[str, Sequence[int]], nproc: int, *, backend: str, dtype: str,
                 repeats: int, warmup: int, link_peak_gbps: float | None,
                 timeout_s: float) -> pd.DataFrame:
    """:func:`run_collectives` on sizes taken as they are (no check): one torchrun launch."""
    what = f"torchrun {','.join(plan)} on {nproc} ranks"
    several = len(plan) > 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cmd = _torchrun_cmd(plan, nproc, backend, dtype, repeats, warmup, folder)
        try:
            code, stderr = launch(cmd, folder, timeout_s)
        except KeyboardInterrupt:
            raise CollectiveInterrupted(_partial(folder, link_peak_gbps)) from None
        partial = _partial(folder, link_peak_gbps)
        kept = _kept(partial, several)
        if code is None:
            raise CollectiveFailed(f"{what} timed out after {timeout_s:g} s (--timeout){kept}",
                                   partial)
        if code != 0 or len(partial) < sum(len(s) for s in plan.values()):
            cause = failure_cause(folder, stderr, code, name_op=several)
            raise CollectiveFailed(f"{what} failed: {cause}{kept}", partial)
    return partial


def _partial(folder: Path, link_peak_gbps: float | None) -> pd.DataFrame:
    path = folder / SAMPLES
    lines = path.read_text().splitlines() if path.exists() else []
    # a line cut short by a kill is not a size measured
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return summarize_samples(rows, link_peak_gbps)


def measured_sizes(partial: pd.DataFrame, by_op: bool) -> str:
    """The sizes in ``partial``, e.g. ``512, 4096``; ``by_op``: each after its op, e.g.
    ``all_reduce 512, 4096; all_gather 512``."""
    if not by_op:
        return ", ".join(str(n) for n in partial["elements"])
    groups = partial.groupby("op", sort=False)["elements"]
    return "; ".join(f"{op} {', '.join(map(str, ns))}" for op, ns in groups)


def _kept(partial: pd.DataFrame, by_op: bool) -> str:
    if partial.empty:
        return ""
    return f" (kept the sizes measured before: {measured_sizes(partial, by_op)})"


def launch(cmd: list[str], folder: Path, timeout_s: float) -> tuple[int | None, str]:
    """Run torchrun in a session of its own: (exit code, or None on timeout; its output).
    On a timeout or Ctrl-C, every process it started is stopped (:func:`stop`)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    log = folder / "torchrun.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        code: int | None = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = None
        stop(proc, folder)
    except BaseException:
        stop(proc, folder)
        raise
    return code, log.read_text(errors="replace")


def stop(proc: subprocess.Popen, folder: Path, grace_s: float = 5.0) -> None:
    """SIGTERM torchrun's session (torchrun then stops its ranks), SIGKILL it after
    ``grace_s``, then every process whose command line names ``folder``: torchrun starts each
    rank in a session of its own, so a rank outlives a killed torchrun."""
    import psutil

    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()
    left = []
    for p in psutil.process_iter(["cmdline"]):
        if str(folder) in (p.info["cmdline"] or []) and p.pid != os.getpid():
            with contextlib.suppress(psutil.Error):
                p.kill()
                left.append(p)
    psutil.wait_procs(left, timeout=grace_s)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def failure_cause(folder: Path, stderr: str, code: int | None, name_op: bool = False) -> str:
    """The first failure among the ranks, as the rank said it (``rankN.error``), else what
    torchrun's own output says last; ``name_op``: say the collective that failed too (when
    the launch ran several)."""
    errors = []
    for path in folder.glob("rank*.error"):
        with contextlib.suppress(ValueError, OSError):
            errors.append(json.loads(path.read_text()))
    if errors:
        first = min(errors, key=lambda e: e["time_ns"])
        op = f", {first['op']}" if name_op and first.get("op") else ""
        at = f" at {first['elements']} elements" if first.get("elements") is not None else ""
        return f"rank {first['rank']}{op}{at}: {first['message']}"
    if m := re.search(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", stderr, re.DOTALL):
        rank, rc = m.group(1), int(m.group(2))
        how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
        return f"rank {rank} ended ({how}) without saying why"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return f"exit {code}: {lines[-1] if lines else 'no output'}"


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
    _drop_invalid(store, rows)
    return store.add_results(rows)  # type: ignore[attr-defined]


def _drop_invalid(store: object, rows: list[ResultRow]) -> None:
    """Delete the stored ``invalid`` rows that ``rows`` measure again: for a collective,
    ``invalid`` says only that a bus bandwidth beat the ``--link-peak-gbps`` given then (a
    mistaken one too), so it is replaced like a failure, which the store does by itself."""
    sql = ("DELETE FROM results WHERE status = 'invalid' AND vector_id = ? AND pass = ? "
           "AND backend = ? AND device = ? AND dtype = ?")
    con = store.con  # type: ignore[attr-defined]
    with store.transaction():  # type: ignore[attr-defined]
        for r in rows:
            con.execute(sql, [r.vector_id, r.pass_, r.backend, r.device, r.dtype]).fetchall()


def element_bytes(dtype: str) -> int:
    return dtype_bytes(dtype)
