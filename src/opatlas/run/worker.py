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
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opatlas.errors import InvalidShape, OpatlasError
from opatlas.ops.registry import resolved_params

STARTED = "started"  # the worker's first word: spawn's start-up (importing __main__) is over
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

    conn.send((STARTED, None, ""))
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
        self.started = False  # a worker of this handle ran its own code once

    def _start(self) -> Outcome | None:
        """Start a worker and wait until it is ready; an outcome if it could not start.
        Raises :class:`WorkerStartError` when the first one dies before its own code runs:
        so would every other, and recording each vector as a crash would hide why."""
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=worker_main, daemon=True,
                                     args=(child, self.backend_name, self.ops_modules,
                                           self.backend_options))
        self.proc.start()
        child.close()
        self.conn = parent
        answer = self._startup_answer()
        if answer.status == STARTED:
            self.started = True
            answer = self._startup_answer()
        elif answer.status == "crash" and not self.started:  # died before its code ran
            raise WorkerStartError(_spawn_failed(answer.message.removeprefix("worker process ")))
        if answer.status == READY:
            return None
        self._kill()
        return answer

    def _startup_answer(self) -> Outcome:
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            self._kill()
            return Outcome("timeout", message=f"worker did not start within {STARTUP_TIMEOUT_S:g} s")
        return self._receive()

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


class WorkerStartError(OpatlasError):
    """A worker process that died before its own code ran: it would for every vector."""


def _spawn_failed(died: str) -> str:
    """Why a worker died before it ran: the spawn start method imports the parent's
    ``__main__`` script again in it, whose top-level code then runs again (opening the store
    a second time, starting a run of its own) unless it is under ``if __name__ ==
    "__main__":``. Nothing else user-written runs that early."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main is None:
        return f"a worker process {died} before it started; see its error above"
    return (f"a worker process {died} while importing {main} again, before it started "
            f"(see its error above): multiprocessing's spawn start method runs that script's "
            f"top-level code in every worker, so put the code that runs the sweep (and opens "
            f"its store) under `if __name__ == \"__main__\":`; nothing was recorded")


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
