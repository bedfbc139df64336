"""PyTorch on the CPU, timed with ``time.perf_counter_ns`` around each pass.

Option ``threads=N`` (``--backend-opt threads=1``) fixes PyTorch's intra-op threads in the
measuring process. On a machine that other work shares, a multi-threaded kernel waits at each
barrier for a thread the OS has descheduled, and single repeats jump to a scheduler time slice
(milliseconds, whatever the op); one thread gives stable timings there, at the cost of measuring
one core. Without it, the threads are the physical cores this process may run on (PyTorch's own
default), set explicitly: a Ray worker, which Ray starts with ``OMP_NUM_THREADS=1``, measures as
the local runner does. The count is always recorded in ``versions()``."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from opatlas.backends.base import Backend, filled_samples, min_time_ns, min_time_version
from opatlas.ops.base import Op


@cache
def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


@cache
def default_threads() -> int:
    """The physical cores among the CPUs this process may run on (PyTorch's default intra-op
    thread count, which ``OMP_NUM_THREADS`` would override); at least one."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores: set[tuple[str, str]] = set()
    try:
        cpu = physical = ""
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "processor":
                cpu, physical = value, ""
            elif key == "physical id":
                physical = value
            elif key == "core id" and (allowed is None or int(cpu) in allowed):
                cores.add((physical, value))
    except (OSError, ValueError):
        cores.clear()
    return max(1, len(cores) or (len(allowed) if allowed else os.cpu_count() or 1))


def thread_env(threads: int) -> dict[str, str]:
    """The variables that size the OpenMP and MKL thread pools of a process started with them."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


# the dtypes the catalog's PyTorch ops build tensors of (opatlas.ops.torchutil)
TORCH_DTYPES = ("fp64", "fp32", "fp16", "bf16")


def warm_torch(device: str) -> None:
    """PyTorch's lazy start-up, paid once per process: the import, the device's first kernels
    and thread pool, and autograd's first backward with an explicit gradient (as every op's
    ``bwd`` runs it), which imports its symbolic-shape helpers (sympy: 0.3 s). Nothing when
    PyTorch is not installed: the ops that need it say so."""
    try:
        import torch
    except ImportError:
        return
    x = torch.ones(8, 8, device=device, requires_grad=True)
    y = torch.nn.functional.gelu(x @ x)
    y.backward(torch.ones_like(y))


def _threads(value: int | str) -> int:
    """The ``threads`` option as a count >= 1; anything else (an empty value too: it is not
    "the default", which is the option left out) is refused naming the value."""
    try:
        threads = int(value)
    except ValueError:
        raise ValueError(f"threads must be a whole number >= 1, got {value!r}") from None
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return threads


class CpuBackend(Backend):
    name = "cpu"
    dtypes = TORCH_DTYPES

    def __init__(self, threads: int | str | None = None,
                 min_time_ms: float | str | None = None) -> None:
        self.threads = default_threads() if threads is None else _threads(threads)
        self.min_time_ns = min_time_ns(min_time_ms)
        self._pinned = False

    def device_name(self) -> str:
        return cpu_model_name()

    def versions(self) -> dict[str, str]:
        out = {"python": platform.python_version(), "threads": str(self.threads)}
        out.update(min_time_version(self.min_time_ns))
        try:
            from importlib.metadata import version

            out["torch"] = version("torch")
        except Exception:  # torch not installed: ops that need it will say so
            pass
        return out

    def start(self) -> None:
        self._pin_threads()
        warm_torch("cpu")

    def measure(self, op: Op, params: Mapping[str, Any], passes: Sequence[str], repeats: int,
                warmup: int) -> dict[str, list[int]]:
        self._pin_threads()
        state = op.build(params, "cpu")
        timings: dict[str, list[int]] = {}
        for pass_ in passes:
            for _ in range(warmup):
                op.execute(state, pass_, op.prepare(state, pass_))
            timings[pass_] = filled_samples(lambda n, p=pass_: self._samples(op, state, p, n),
                                          repeats, self.min_time_ns)
        return timings

    @staticmethod
    def _samples(op: Op, state: Any, pass_: str, repeats: int) -> list[int]:
        clock, samples = time.perf_counter_ns, []
        for _ in range(repeats):
            prepared = op.prepare(state, pass_)
            t0 = clock()
            op.execute(state, pass_, prepared)
            samples.append(clock() - t0)
        return samples

    def _pin_threads(self) -> None:
        if not self._pinned:
            import torch

            torch.set_num_threads(self.threads)
            self._pinned = True
