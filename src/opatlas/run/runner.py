"""The sweep runner: vectors -> guarded worker -> statistics -> store, resumable."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opatlas.backends import get_backend
from opatlas.errors import OpatlasError
from opatlas.ops import get_op, load_ops_module
from opatlas.ops.registry import resolved_params
from opatlas.run.progress import Progress
from opatlas.run.stats import summarize
from opatlas.run.worker import Outcome, WorkerHandle
from opatlas.spec import SweepSpec
from opatlas.store import ResultRow, Store
from opatlas.sweep import Vector, canonical_json, expand, params_json, vector_id

FAILED = ("error", "oom", "timeout", "crash")


@dataclass
class RunConfig:
    backend: str = "cpu"
    repeats: int | None = None  # None: the spec's
    warmup: int | None = None
    timeout_s: float = 120.0
    passes: Sequence[str] | None = None
    retry_failed: bool = False
    flush_every: int = 64
    flush_seconds: float = 2.0
    log_every: int = 100
    interactive: bool | None = None
    ops_modules: Sequence[str] = ()
    backend_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    total: int = 0
    skipped: int = 0
    ran: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0

    @property
    def rate(self) -> float:
        return self.ran / self.elapsed_s if self.elapsed_s > 0 else 0.0


class InProcess:
    """Runs vectors in this process: for backends that cannot crash or hang (simulators)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def run(self, op: str, params: Any, passes: Any, repeats: int, warmup: int,
            timeout: float) -> Outcome:
        from opatlas.run.worker import _classify

        try:
            o, full = resolved_params(op, params)
            return Outcome("ok", self.backend.measure(o, full, passes, repeats, warmup))
        except Exception as exc:  # recorded like the worker would
            return Outcome(_classify(exc), message=f"{type(exc).__name__}: {exc}"[:2000])

    def close(self) -> None:
        pass


def sweep_id(spec: SweepSpec) -> str:
    return vector_id("sweep", json.loads(spec.model_dump_json()))


class Runner:
    """Runs vectors of one spec on one backend and records every outcome in the store."""

    def __init__(self, store: Store, config: RunConfig | None = None) -> None:
        self.store = store
        self.config = config or RunConfig()
        for m in self.config.ops_modules:
            load_ops_module(m)
        self.backend = get_backend(self.config.backend, **self.config.backend_options)
        self.device = self.backend.device_name()
        self.versions = canonical_json(self.backend.versions())

    def run(self, spec: SweepSpec, vectors: Sequence[Vector]) -> RunSummary:
        cfg = self.config
        op, _ = get_op(spec.op)
        passes = [p for p in (cfg.passes or spec.passes or op.passes) if p in op.passes]
        if not passes:
            raise OpatlasError(f"op {op.name!r} has none of the passes {cfg.passes}; "
                               f"it has {list(op.passes)}")
        repeats = cfg.repeats or spec.repeats
        warmup = spec.warmup if cfg.warmup is None else cfg.warmup
        skip = self.store.done_vector_ids(
            cfg.backend, self.device,
            statuses=("ok", "invalid") if cfg.retry_failed else None)
        todo = [v for v in vectors if v.id not in skip]
        summary = RunSummary(total=len(vectors), skipped=len(vectors) - len(todo))
        worker: Any = InProcess(self.backend) if getattr(self.backend, "in_process", False) else \
            WorkerHandle(cfg.backend, [str(m) for m in cfg.ops_modules],
                         backend_options=cfg.backend_options)
        pending: list[ResultRow] = []
        last_flush = time.monotonic()
        t0 = time.monotonic()
        try:
            with Progress(len(todo), label=f"{spec.name} on {cfg.backend}",
                          interactive=cfg.interactive, log_every=cfg.log_every) as progress:
                for vec in todo:
                    outcome = worker.run(vec.op, vec.params, passes, repeats, warmup,
                                         cfg.timeout_s)
                    pending.extend(self._rows(vec, passes, outcome))
                    summary.ran += 1
                    summary.statuses[outcome.status] += 1
                    progress.advance(outcome.status)
                    now = time.monotonic()
                    limit = 20 * cfg.flush_every if isinstance(worker, InProcess) else cfg.flush_every
                    if len(pending) >= limit or now - last_flush >= cfg.flush_seconds:
                        self.store.add_results(pending)
                        pending, last_flush = [], now
        finally:
            if pending:
                self.store.add_results(pending)
            worker.close()
            summary.elapsed_s = time.monotonic() - t0
        return summary

    def _rows(self, vec: Vector, passes: Sequence[str], outcome: Outcome) -> list[ResultRow]:
        try:
            op, full = resolved_params(vec.op, vec.params)
            flops, nbytes = op.flops(full), op.min_bytes(full)
        except Exception:  # counting must never lose a measurement
            flops, nbytes = {}, {}
        rows = []
        for pass_ in passes:
            row = ResultRow(
                vector_id=vec.id, op=vec.op, params_json=params_json(vec.params),
                pass_=pass_, backend=self.config.backend, device=self.device,
                dtype=str(vec.params.get("dtype", "fp32")), status=outcome.status,
                message=outcome.message, versions_json=self.versions,
                flops=flops.get(pass_), min_bytes=nbytes.get(pass_),
            )
            samples = (outcome.timings or {}).get(pass_)
            if outcome.status == "ok" and samples:
                row.repeats = len(samples)
                for k, v in summarize(samples).items():
                    setattr(row, k, v)
            rows.append(row)
        return rows


def run_spec(spec: SweepSpec, store: Store, config: RunConfig | None = None, *,
             parts: int = 1, part: int = 1, where: str | None = None) -> RunSummary:
    """Expand ``spec`` (this part, this selection), record the sweep, run what is not done."""
    config = config or RunConfig()
    for m in config.ops_modules:
        load_ops_module(m)
    expansion = expand(spec, parts=parts, part=part, where=where, keep_invalid=True)
    store.add_sweep(sweep_id(spec), spec.name, spec.op, spec.source, spec.model_dump_json(),
                    expansion.vectors, expansion.invalid_vectors)
    return Runner(store, config).run(spec, expansion.vectors)
