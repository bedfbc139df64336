"""The sweep runner: vectors -> guarded worker -> statistics -> store, resumable."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opatlas.backends import get_backend
from opatlas.backends.base import backend_dtypes, check_backend_op
from opatlas.console import counted
from opatlas.errors import OpatlasError, SpecError
from opatlas.ops import get_op, load_ops_module
from opatlas.run.plan import SweepPlan, record_sweep
from opatlas.run.progress import Progress
from opatlas.run.records import ResultWriter, RowBuilder
from opatlas.run.worker import InProcess, open_worker
from opatlas.spec import SweepSpec
from opatlas.store import Store
from opatlas.sweep import VectorStream, canonical_json


@dataclass
class RunConfig:
    """How a sweep is run: the API's counterpart of ``opatlas run``'s options.

    Fields (checked on construction, with the CLI's minimums; a bad value raises
    :class:`~opatlas.errors.OpatlasError` naming the field and the value):

    - ``backend``: the backend that measures (``cpu``, ``cuda``, ...; ``--backend``).
    - ``repeats``: timed repeats per pass, >= 1; None: the spec's (``--repeats``).
    - ``warmup``: untimed warm-up runs per pass, >= 0; None: the spec's (``--warmup``).
    - ``timeout_s``: seconds one vector may take before it is recorded as ``timeout``,
      >= 0.01 (``--timeout``).
    - ``passes``: the passes to measure (``fwd``, ``bwd``, ...), those the op has; None: the
      spec's, else every pass of the op.
    - ``retry_failed``: run again vectors recorded as error/oom/timeout/crash
      (``--retry-failed``); without it they are skipped like measured ones.
    - ``flush_every``: rows buffered before they are written to the store, >= 1.
    - ``flush_seconds``: seconds after which buffered rows are written anyway, >= 0.
    - ``log_every``: vectors between progress lines when not interactive, >= 1
      (``--log-every``).
    - ``interactive``: a live progress bar (True) or log lines (False); None: a bar when
      stderr is a terminal.
    - ``ops_modules``: modules (or ``.py`` files) of user ops to import first (``--ops-module``).
    - ``backend_options``: backend settings (``--backend-opt``: threads, timing ...).
    """

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

    def __post_init__(self) -> None:
        for name, kind, least in (("repeats", int, 1), ("warmup", int, 0)):
            check_field(self, name, kind, least, none="the spec's")
        for name, kind, least in (("timeout_s", float, 0.01), ("flush_every", int, 1),
                                  ("flush_seconds", float, 0), ("log_every", int, 1)):
            check_field(self, name, kind, least)


def check_field(config: object, name: str, kind: type, minimum: float, *,
                none: str | None = None) -> None:
    """Refuse a settings dataclass's field that is not a number of ``kind`` (an int for a
    float field too) of at least ``minimum``, naming the class, the field and the value;
    ``none``: what None means where it is allowed."""
    value = getattr(config, name)
    if value is None and none is not None:
        return
    kinds = (int,) if kind is int else (int, float)
    what = "an integer" if kind is int else "a number"
    if isinstance(value, bool) or not isinstance(value, kinds) or not value >= minimum:
        also = f" (or None: {none})" if none is not None else ""
        raise OpatlasError(f"{type(config).__name__} {name}={value!r}: expected {what} >= "
                           f"{minimum}{also}")


@dataclass
class NodeStats:
    """What one node (or worker) did in a distributed run."""

    vectors: int = 0
    failures: int = 0
    busy_s: float = 0.0
    devices: set[str] = field(default_factory=set)  # device ids its workers saw


@dataclass
class RunSummary:
    """What a run did, as ``run_spec`` returns it (and ``opatlas run`` prints it).

    - ``total``: vectors in the sweep (this part, this selection); ``skipped``: those the
      store held already (not run again); ``ran``: those measured by this run.
    - ``statuses``: vectors run, by outcome (``ok``, ``error``, ``oom``, ``timeout``, ``crash``,
      ``invalid``); ``failed_earlier``: of the skipped ones, those recorded as failed, by status
      (run them again with ``RunConfig(retry_failed=True)``).
    - ``elapsed_s``: wall time of the run; ``rate`` (property): vectors run per second.
    - ``nodes``: per node or worker, what it did (distributed runs only).
    - ``retried_chunks``: chunks of work run again after a worker was lost (distributed).
    - ``duplicate_rows``: rows the store already held (ignored, never written twice).
    - ``not_run``: vectors left to run because a task of a job array failed;
      ``failed_tasks``: those tasks, as said to the user.
    - ``notes``: lines for the user, printed after the summary (stderr).
    """

    total: int = 0
    skipped: int = 0
    ran: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    nodes: dict[str, NodeStats] = field(default_factory=dict)  # filled by distributed runs
    retried_chunks: int = 0
    duplicate_rows: int = 0  # rows the store already held (ignored, never written twice)
    # of the skipped vectors, those recorded as failed, by status (without --retry-failed)
    failed_earlier: Counter[str] = field(default_factory=Counter)
    not_run: int = 0  # vectors left to run because a task of a job array failed
    failed_tasks: list[str] = field(default_factory=list)  # those tasks, as said to the user
    notes: list[str] = field(default_factory=list)  # for the user, after the summary (stderr)

    @property
    def rate(self) -> float:
        return self.ran / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class Measurement:
    """How every vector of one run is measured."""

    passes: tuple[str, ...]
    repeats: int
    warmup: int
    timeout_s: float


def measurement(spec: SweepSpec, cfg: RunConfig) -> Measurement:
    op, _ = get_op(spec.op)
    asked = list(cfg.passes or spec.passes or op.passes)
    passes = [p for p in asked if p in op.passes]
    if not passes:
        raise OpatlasError(f"op {op.name!r} has none of the passes {asked}; "
                           f"it has {list(op.passes)}")
    if lacking := [p for p in asked if p not in op.passes]:  # never measured less, silently
        raise OpatlasError(f"op {op.name!r} has no pass {', '.join(map(repr, lacking))} of "
                           f"the passes {asked}; it has {list(op.passes)}")
    return Measurement(tuple(passes), spec.repeats if cfg.repeats is None else cfg.repeats,
                       spec.warmup if cfg.warmup is None else cfg.warmup, cfg.timeout_s)


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

    def run(self, plan: SweepPlan, also_done: np.ndarray | None = None) -> RunSummary:
        """Run what the store does not hold yet of ``plan`` (all of it on a fresh store), less
        ``also_done`` (sorted vector keys held elsewhere)."""
        cfg, spec = self.config, plan.spec
        how = measurement(spec, cfg)
        plan = dataclasses.replace(plan, passes=how.passes)  # done: every pass it measures
        work = plan.work(self.store, cfg.backend, self.device, cfg.retry_failed, also_done)
        summary = RunSummary(total=work.total, skipped=work.skipped, failed_earlier=work.failed)
        if work.skipped:
            summary.notes += self._other_settings(plan, how)
        worker = open_worker(self.backend, cfg.backend, cfg.ops_modules, cfg.backend_options)
        builder = RowBuilder(cfg.backend, self.device, self.versions)
        in_process = isinstance(worker, InProcess)
        writer = ResultWriter(self.store, (20 if in_process else 1) * cfg.flush_every,
                              cfg.flush_seconds)
        t0 = time.monotonic()
        try:
            with writer, Progress(work.todo, label=f"{spec.name} on {cfg.backend}",
                                  interactive=cfg.interactive, log_every=cfg.log_every) as progress:
                for vec in work.vectors():
                    outcome = worker.run(vec.op, vec.params, how.passes, how.repeats, how.warmup,
                                         how.timeout_s)
                    writer.add(builder.rows(vec, how.passes, outcome))
                    summary.ran += 1
                    summary.statuses[outcome.status] += 1
                    progress.advance(outcome.status)
        finally:
            worker.close()
            summary.elapsed_s = time.monotonic() - t0
            summary.duplicate_rows = writer.ignored
        return summary


    def _other_settings(self, plan: SweepPlan, how: Measurement) -> list[str]:
        """A note when vectors the store holds already (kept, not run again) were measured
        with other settings than this run's: repeats, or a backend option or version the rows
        record (their ``versions_json``: ``threads``, ``timing``, torch ...)."""
        cfg = self.config
        groups = self.store.settings_of(cfg.backend, self.device, plan.keys, how.passes)
        samples = _FIXED_SAMPLES.get(cfg.backend, how.repeats)
        differ = [setting_changes(repeats, versions, samples, self.versions)
                  for repeats, versions, _ in groups]
        n = min(plan.valid, sum(g[2] for g, d in zip(groups, differ, strict=True) if d))
        if not n:
            return []
        changes = ", ".join(dict.fromkeys(c for d in differ for c in d))
        warmup = (" (the warm-up is not recorded, so --warmup cannot be compared)"
                  if cfg.warmup is not None else "")
        were = "was" if n == 1 else "were"
        return [f"note: {counted(n, 'vector')} already in the store {were} measured with "
                f"other settings than this run's: {changes}{warmup}; they are kept as "
                f"stored, not measured again (a store keeps each vector's first measurement): "
                f"to measure them with this run's settings, use another --store"]


# backends that record a fixed count of samples whatever --repeats asks (deterministic)
_FIXED_SAMPLES = {"wormhole-sim": 1}


def setting_changes(repeats: int, versions_json: str, now_repeats: int, now_versions: str
                    ) -> list[str]:
    """How stored rows' settings (repeats, ``versions_json``) differ from this run's, one
    phrase each: ``repeats 5 (this run: 9)``, ``threads 1 (this run: 2)``. Under
    ``min_time_ms`` (either side) a stored count is the fill's result, at least the repeats
    asked: only fewer samples than this run asks for is a difference."""
    try:
        old, new = json.loads(versions_json or "{}"), json.loads(now_versions)
    except ValueError:  # not ours to judge: an import's free text
        old, new = None, {}
    filled = any(isinstance(v, dict) and v.get("min_time_ms") is not None for v in (old, new))
    if filled:
        out = [f"repeats {repeats} (this run: at least {now_repeats})"] \
            if repeats < now_repeats else []
    else:
        out = [f"repeats {repeats} (this run: {now_repeats})"] if repeats != now_repeats else []
    if not isinstance(old, dict):
        return out
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            out.append(f"{key} {old.get(key, 'unset')} (this run: {new.get(key, 'unset')})")
    return out


def check_backend_dtypes(spec: SweepSpec, backend: str, *, parts: int = 1, part: int = 1,
                         where: str | None = None, file: str | None = None) -> None:
    """Refuse a sweep (this part, this selection) that holds a vector of a dtype ``backend``
    cannot run, before anything runs: each would only be recorded as an error, one by one.
    The grid is read only when the spec names such a dtype, up to the first such vector.
    ``file``: the spec's file, named in the error."""
    runs = backend_dtypes(backend)
    if runs is None or not _builtin_op(spec.op):  # a user's op may run dtypes of its own
        return
    suspects = {value: key for key, value in reversed(spec.dtypes()) if value not in runs}
    if not suspects:
        return
    for batch in VectorStream(spec, parts=parts, part=part, where=where):
        for vec in batch.vectors:
            dtype = vec.params.get("dtype", spec.dtype)
            if dtype not in runs:
                others = len({v for k, v in spec.dtypes() if k.startswith("params.")}) > 1
                select = f", select the others with --where \"dtype != '{dtype}'\"" \
                    if others else ""
                raise SpecError(
                    f"backend {backend!r} cannot run this dtype (it runs {', '.join(runs)}): "
                    f"drop it from spec {spec.name}{select} or use another backend",
                    file=file, key=suspects.get(dtype, "dtype"), value=dtype)


def _builtin_op(name: str) -> bool:
    """Whether ``name`` is a catalog op (built by the backend's tensors: its dtypes apply),
    not one an ``--ops-module`` brings."""
    from opatlas.ops.registry import BUILTIN_MODULES, get_op

    try:
        return type(get_op(name)[0]).__module__ in BUILTIN_MODULES
    except Exception:  # unknown here: the spec check names it
        return False


def prepare_run(spec: SweepSpec, store: Store, config: RunConfig, *, parts: int = 1,
                part: int = 1, where: str | None = None, split: int = 1) -> SweepPlan:
    """Cap the store's memory for the sweep, then expand ``spec`` (this part, this selection)
    into the store batch by batch: the plan that both executors run. ``split``: count the
    vectors each of that many parts gets (``SweepPlan.part_sizes``)."""
    for m in config.ops_modules:
        load_ops_module(m)
    check_backend_op(config.backend, spec.op)
    check_backend_dtypes(spec, config.backend, parts=parts, part=part, where=where)
    store.limit_memory()
    return record_sweep(spec, store, parts=parts, part=part, where=where,
                        passes=measurement(spec, config).passes, split=split)


def run_spec(spec: SweepSpec, store: Store, config: RunConfig | None = None, *,
             parts: int = 1, part: int = 1, where: str | None = None) -> RunSummary:
    """Expand ``spec`` (this part, this selection), record the sweep, run what is not done."""
    config = config or RunConfig()
    plan = prepare_run(spec, store, config, parts=parts, part=part, where=where)
    return Runner(store, config).run(plan)
