"""A sweep's vectors as a run sees them, without holding them all: recorded in the store batch
by batch, then streamed again, less what the store holds already (resume).

Both executors go through here (the local runner and the Ray driver), so a 1M-vector sweep
costs the driver one batch of vectors plus 16 bytes per vector (their keys, which count the work
left for the progress bar and its ETA) instead of the whole expanded list.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from opatlas.run.progress import Progress
from opatlas.spec import SweepSpec
from opatlas.store import Store
from opatlas.store.db import FINAL_STATUSES, STATUSES
from opatlas.store.keys import KEY_DTYPE, contains, vector_keys
from opatlas.sweep import Vector, VectorStream, vector_id
from opatlas.sweep.expand import DEFAULT_BATCH, own_expander

RESUMABLE = FINAL_STATUSES  # what --retry-failed keeps; every other status runs again
QUIET_RECORDING_S = 2.0  # a sweep's recording shorter than this says nothing
LOG_EVERY_RECORDED = 100_000  # vectors recorded between log lines (and every 30 s)
FAILED = tuple(s for s in STATUSES if s not in FINAL_STATUSES)  # error, oom, timeout, crash


def sweep_id(spec: SweepSpec) -> str:
    return vector_id("sweep", json.loads(spec.model_dump_json()))


@dataclass(frozen=True)
class SweepPlan:
    """One part and selection of a spec, recorded in the store: ``keys`` are its valid
    vectors' keys in grid order (what is left to run is counted on them); ``passes`` those
    each vector is measured for (a vector lacking one of them is not done; none given: any
    recorded pass makes it done)."""

    spec: SweepSpec
    parts: int
    part: int
    where: str | None
    keys: np.ndarray
    batch_size: int = DEFAULT_BATCH
    passes: tuple[str, ...] = ()
    part_sizes: tuple[int, ...] = ()  # valid vectors per part of a split (record_sweep)

    @property
    def valid(self) -> int:
        return len(self.keys)

    def stream(self, *, keep_invalid: bool = False) -> VectorStream:
        return VectorStream(self.spec, parts=self.parts, part=self.part, where=self.where,
                            keep_invalid=keep_invalid, batch_size=self.batch_size)

    def work(self, store: Store, backend: str, device: str, retry_failed: bool = False,
             also_done: np.ndarray | None = None) -> Work:
        """What (backend, device) still has to run: the vectors the store does not hold yet
        for it, every pass of ``passes``; with ``retry_failed``, failed ones
        (error/oom/timeout/crash) run again. A vector lacking a pass runs whole: the rows it
        has already are kept (the store ignores them), so none is recorded twice.
        ``also_done``: sorted keys held elsewhere (a job array's driver store), skipped too."""
        done = store.done_keys(backend, device, RESUMABLE if retry_failed else None,
                               self.passes)
        if also_done is not None and len(also_done):
            done = np.union1d(done, also_done)
        skip = contains(done, self.keys)
        failed = Counter() if retry_failed else self._failed(store, backend, device, skip)
        return Work(total=self.valid, todo=int(np.count_nonzero(~skip)),
                    batches=self._pending(done), failed=failed)

    def left(self, store: Store, backend: str, devices: Sequence[str]) -> int:
        """The valid vectors that none of ``devices`` has recorded (every pass of ``passes``,
        with any status): those no one ran yet."""
        done = np.empty(0, dtype=KEY_DTYPE)
        for device in devices:
            done = np.union1d(done, store.done_keys(backend, device, None, self.passes))
        return self.valid - int(np.count_nonzero(contains(done, self.keys)))

    def _failed(self, store: Store, backend: str, device: str, skip: np.ndarray
                ) -> Counter[str]:
        """Of the vectors skipped (``skip``: a mask over ``keys``), those the store holds as
        failed, by status: each under the first of FAILED it has (a vector's passes fail
        together)."""
        if not skip.any():
            return Counter()
        left = skip.copy()
        out: Counter[str] = Counter()
        for status, keys in store.keys_by_status(backend, device, FAILED).items():
            hit = left & contains(keys, self.keys)
            if n := int(np.count_nonzero(hit)):
                out[status] = n
            left &= ~hit
        return out

    def _pending(self, done: np.ndarray) -> Iterator[list[Vector]]:
        """The valid vectors again, in order, less those whose key is in ``done``."""
        for batch in self.stream():
            if not len(done):
                yield batch.vectors
                continue
            skip = contains(done, vector_keys(v.id for v in batch.vectors))
            yield [v for v, s in zip(batch.vectors, skip, strict=True) if not s]


@dataclass
class Work:
    """The vectors one (backend, device) still has to run, expanded as they are taken."""

    total: int  # valid vectors of the plan
    todo: int   # of which not done yet
    batches: Iterator[list[Vector]]
    failed: Counter[str] = field(default_factory=Counter)  # skipped, recorded as failed

    @property
    def skipped(self) -> int:
        return self.total - self.todo

    def vectors(self) -> Iterator[Vector]:
        return itertools.chain.from_iterable(self.batches)

    def chunks(self, size: int) -> Iterator[list[Vector]]:
        """Lists of ``size`` vectors (the last may be shorter), across batch boundaries."""
        vectors = self.vectors()
        while chunk := list(itertools.islice(vectors, max(1, size))):
            yield chunk


def record_sweep(spec: SweepSpec, store: Store, *, parts: int = 1, part: int = 1,
                 where: str | None = None, batch_size: int = DEFAULT_BATCH,
                 passes: tuple[str, ...] = (), split: int = 1,
                 quiet_s: float = QUIET_RECORDING_S) -> SweepPlan:
    """Expand ``spec`` (this part, this selection) batch by batch into the store's ``vectors``
    table (valid ones, and invalid ones with their reasons), one transaction per batch.
    A recording that lasts over ``quiet_s`` shows its progress on stderr. ``split`` > 1
    counts the valid vectors each of ``split`` parts (as ``--parts`` splits) would get, in
    the plan's ``part_sizes``."""
    plan = SweepPlan(spec, parts, part, where, np.empty(0, dtype=KEY_DTYPE), batch_size,
                     passes)
    stream = plan.stream(keep_invalid=True)  # a bad part or selection fails before any write
    sid = sweep_id(spec)
    store.add_sweep(sid, spec.name, spec.op, spec.source, spec.model_dump_json())
    keys = [plan.keys]
    sizes = np.zeros(split, dtype=np.int64)
    with _RecordingProgress(f"recording the sweep {spec.name} in the store",
                            grid_points(stream), quiet_s) as progress:
        for batch in stream:
            store.add_vectors(sid, batch.vectors, batch.invalid)
            keys.append(vector_keys(v.id for v in batch.vectors))
            if split > 1:
                index = np.fromiter((v.index for v in batch.vectors), dtype=np.int64)
                sizes += np.bincount(index % split, minlength=split)
            progress.advance(len(batch.vectors), len(batch.invalid))
    return dataclasses.replace(plan, keys=np.concatenate(keys),
                               part_sizes=tuple(int(n) for n in sizes) if split > 1 else ())


def grid_points(stream: VectorStream) -> int | None:
    """The points the stream's batches hold in all (valid and invalid), where that is known
    without expanding: the generic expansion of a whole selection, not thinned per suite.
    None elsewhere (a registered expander, a ``--where``, ``max_per_suite``)."""
    spec = stream.spec
    if stream.where or spec.max_per_suite is not None or own_expander(spec) is not None:
        return None
    size = math.prod(len(values) for _, values in spec.axes())
    return max(0, size - stream.part + stream.parts) // stream.parts


class _RecordingProgress:
    """Progress of a sweep's recording, shown only once it has lasted ``quiet_s`` (a small
    sweep records in a blink and says nothing)."""

    def __init__(self, label: str, total: int | None, quiet_s: float) -> None:
        self.label, self.total, self.quiet_s = label, total, quiet_s
        self.t0 = time.monotonic()
        self.valid = self.invalid = 0
        self.bar: Progress | None = None

    def __enter__(self) -> _RecordingProgress:
        return self

    def advance(self, valid: int, invalid: int) -> None:
        self.valid += valid
        self.invalid += invalid
        if self.bar is None:
            if time.monotonic() - self.t0 < self.quiet_s:
                return
            self.bar = Progress(self.total, label=self.label, unit="vec",
                                log_every=LOG_EVERY_RECORDED).__enter__()
            self.bar.t0 = self.t0
            valid, invalid = self.valid, self.invalid  # what was recorded before it showed
        if valid:
            self.bar.advance("valid", valid)
        if invalid:
            self.bar.advance("invalid", invalid)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
