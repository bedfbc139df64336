"""From an outcome to stored rows: one row per pass, and batched writes to the store.

Both executors use these: the local runner in its loop, the Ray path with rows built on the
workers and written by the driver alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from opatlas.ops.registry import catalog_counts
from opatlas.run.stats import summarize
from opatlas.run.worker import Outcome
from opatlas.store import ResultRow, Store
from opatlas.sweep import Vector, params_json


@dataclass(frozen=True)
class RowBuilder:
    """Builds the result rows of one vector for one (backend, device)."""

    backend: str
    device: str
    versions_json: str

    def rows(self, vec: Vector, passes: Sequence[str], outcome: Outcome) -> list[ResultRow]:
        flops, nbytes = catalog_counts(vec.op, vec.params)
        rows = []
        for pass_ in passes:
            row = ResultRow(
                vector_id=vec.id, op=vec.op, params_json=params_json(vec.params),
                pass_=pass_, backend=self.backend, device=self.device,
                dtype=str(vec.params.get("dtype", "fp32")), status=outcome.status,
                message=outcome.message, versions_json=self.versions_json,
                flops=flops.get(pass_), min_bytes=nbytes.get(pass_),
            )
            samples = (outcome.timings or {}).get(pass_)
            if outcome.status == "ok" and samples:
                row.repeats = len(samples)
                for k, v in summarize(samples).items():
                    setattr(row, k, v)
            rows.append(row)
        return rows


class ResultWriter:
    """Collects rows and writes them in one transaction every ``flush_rows`` rows or
    ``flush_seconds``; whatever is left is written on exit (also after an exception).

    The store ignores rows it already holds, so ``ignored`` counts rows that were recorded
    before (a retried chunk, a resumed run): they are never written twice.
    """

    def __init__(self, store: Store, flush_rows: int = 64, flush_seconds: float = 2.0) -> None:
        self.store = store
        self.flush_rows, self.flush_seconds = max(1, flush_rows), flush_seconds
        self.pending: list[ResultRow] = []
        self.inserted = self.ignored = 0
        self._last = time.monotonic()

    def add(self, rows: Iterable[ResultRow]) -> None:
        self.pending.extend(rows)
        if len(self.pending) >= self.flush_rows or \
                time.monotonic() - self._last >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            added = self.store.add_results(self.pending)
            self.inserted += added
            self.ignored += len(self.pending) - added
            self.pending = []
        self._last = time.monotonic()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
