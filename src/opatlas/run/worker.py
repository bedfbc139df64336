"""The worker process that executes vectors, and the parent-side handle that guards it.

A vector runs in a long-lived child process. The parent waits for its answer at most
``timeout`` seconds: a hang is killed and recorded as ``timeout``; a child that dies (segfault,
``os._exit``, the OOM killer) is recorded as ``crash`` with its signal or exit code; either way
a fresh worker is started and the sweep goes on. A fresh worker says when it is ready (ops
imported, backend built and started: :meth:`Backend.start` pays PyTorch's import and its lazy
initialisation) before it gets a vector, so its start-up never counts against ``timeout``, nor
against the warm-up: it then runs its first vector once untimed (with the vector's
``timeout``) before timing it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opatlas.errors import InvalidShape
from opatlas.ops.registry import resolved_params

READY = "ready"
STARTUP_TIMEOUT_S = 600.0  # importing torch and building a backend on a loaded machine


@dataclass
class Outcome:
    status: str
    timings: dict[str, list[int]] | None = None
    message: str = ""


def _classify(exc: BaseException) -> str:
    if isinstance(exc, InvalidShape):
        return "invalid"
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" \
            or "out of memory" in str(exc).lower():
        return "oom"
    return "error"


def worker_main(conn: Any, backend_name: str, ops_modules: Sequence[str],
                backend_options: Mapping[str, Any] | None = None) -> None:
    """Child loop: receive (op, params, passes, repeats, warmup); answer with an outcome."""
    from opatlas.backends import get_backend
    from opatlas.ops import list_ops, load_ops_module

    try:
        list_ops()  # imports the built-in catalog now, not in the first vector's time
        for m in ops_modules:
            load_ops_module(m)
        backend = get_backend(backend_name, **(backend_options or {}))
        backend.start()
    except BaseException as exc:  # reported for every vector it was meant to run
        conn.send(("error", None, f"worker could not start: {type(exc).__name__}: {exc}"[:2000]))
        return
    conn.send((READY, None, ""))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if msg is None:
            return
        op_name, params, passes, repeats, warmup = msg
        try:
            op, full = resolved_params(op_name, params)
            timings = backend.measure(op, full, passes, repeats, warmup)
            conn.send(("ok", timings, ""))
        except BaseException as exc:  # every failure is reported, never fatal to the sweep
            status = _classify(exc)
            if status == "oom":
                backend.cleanup()
            conn.send((status, None, f"{type(exc).__name__}: {exc}"[:2000]))


class WorkerHandle:
    """Parent side of one worker; restarts it after a crash or a timeout."""

    def __init__(self, backend_name: str, ops_modules: Sequence[str] = (),
                 start_method: str = "spawn",
                 backend_options: Mapping[str, Any] | None = None) -> None:
        self.backend_name = backend_name
        self.backend_options = dict(backend_options or {})
        self.ops_modules = list(ops_modules)
        self.ctx = mp.get_context(start_method)
        self.proc: Any = None
        self.conn: Any = None
        self.restarts = 0

    def _start(self) -> Outcome | None:
        """Start a worker and wait until it is ready; an outcome if it could not start."""
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=worker_main, daemon=True,
                                     args=(child, self.backend_name, self.ops_modules,
                                           self.backend_options))
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(STARTUP_TIMEOUT_S):
            self._kill()
            return Outcome("timeout", message=f"worker did not start within {STARTUP_TIMEOUT_S:g} s")
        answer = self._receive()
        if answer.status == READY:
            return None
        self._kill()
        return answer

    def _receive(self) -> Outcome:
        try:
            status, timings, message = self.conn.recv()
            return Outcome(status, timings, message)
        except (EOFError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            self._kill()
            return Outcome("crash", message=f"worker process died ({_describe_exit(code)})")

    def _kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def run(self, op: str, params: Mapping[str, Any], passes: Sequence[str], repeats: int,
            warmup: int, timeout: float) -> Outcome:
        if self.proc is None or not self.proc.is_alive():
            if self.proc is not None:
                self.restarts += 1
            failed = self._start() or self._warm_up(op, params, passes, timeout)
            if failed is not None:
                return failed
        return self._measure(op, params, passes, repeats, warmup, timeout)

    def _warm_up(self, op: str, params: Mapping[str, Any], passes: Sequence[str],
                 timeout: float) -> Outcome | None:
        """Run a fresh worker's first vector once, untimed, before it is measured: the first
        op a process runs pays for lazy initialisation (thread pools, allocator, kernel
        caches) that the spec's warm-up runs do not all absorb (a linear's fwd: +14% on a
        CPU with 3 of them; up to 4x seen). Its answer is dropped (a failure recurs in the
        measurement, which reports it), except a timeout or a crash: this vector's outcome."""
        answer = self._measure(op, params, passes, 1, 0, timeout)
        return answer if answer.status in ("timeout", "crash") else None

    def _measure(self, op: str, params: Mapping[str, Any], passes: Sequence[str],
                 repeats: int, warmup: int, timeout: float) -> Outcome:
        try:
            self.conn.send((op, dict(params), list(passes), repeats, warmup))
            ready = self.conn.poll(timeout)
        except (BrokenPipeError, OSError):
            ready = True
        if not ready:
            self._kill()
            self.restarts += 1
            return Outcome("timeout", message=f"no result within {timeout:g} s; worker killed")
        return self._receive()

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(None)
            self.proc.join(2)
        self._kill()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class InProcess:
    """Runs vectors in this process: for backends that cannot crash or hang (simulators)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def run(self, op: str, params: Any, passes: Any, repeats: int, warmup: int,
            timeout: float) -> Outcome:
        try:
            o, full = resolved_params(op, params)
            return Outcome("ok", self.backend.measure(o, full, passes, repeats, warmup))
        except Exception as exc:  # recorded like the worker would
            return Outcome(_classify(exc), message=f"{type(exc).__name__}: {exc}"[:2000])

    def close(self) -> None:
        pass


def open_worker(backend: Any, backend_name: str, ops_modules: Sequence[str] = (),
                backend_options: Mapping[str, Any] | None = None) -> InProcess | WorkerHandle:
    """The executor of vectors for ``backend``: in this process for backends that declare
    ``in_process`` (they cannot crash or hang), else a guarded worker process."""
    if getattr(backend, "in_process", False):
        return InProcess(backend)
    return WorkerHandle(backend_name, [str(m) for m in ops_modules],
                        backend_options=backend_options)
