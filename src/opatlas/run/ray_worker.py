"""The Ray side of a distributed sweep: one long-lived worker per device.

``DeviceWorker`` is a plain class; the executor turns it into a Ray actor that holds one device
(``num_gpus``, ``TTNPU`` or CPUs). It builds the backend once and keeps the guarded worker
process of the local runner warm across chunks: every vector still runs in that process, so an
exception, an OOM, a crash or a hang is recorded as on one machine. It never opens the store; it
returns rows, and the driver writes them. This module does not import Ray.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opatlas.backends import get_backend
from opatlas.backends.cpu import thread_env
from opatlas.ops import load_ops_module
from opatlas.run.records import RowBuilder
from opatlas.run.runner import Measurement
from opatlas.run.worker import open_worker
from opatlas.store import ResultRow
from opatlas.sweep import Vector, canonical_json

# What Ray sets for a worker that holds accelerators (NVIDIA GPUs, Tenstorrent cards).
VISIBLE_DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "TT_VISIBLE_DEVICES")


def visible_devices() -> dict[str, str]:
    """The accelerator ids this process may use, as Ray set them (only the variables set)."""
    return {k: os.environ[k] for k in VISIBLE_DEVICE_VARS if k in os.environ}


def node_label() -> str:
    """Host name and Ray node id (short), or just the host name outside Ray."""
    host = socket.gethostname()
    try:
        import ray

        if not ray.is_initialized():  # asking Ray for its context would start a Ray here
            return host
        return f"{host}/{ray.get_runtime_context().get_node_id()[:8]}"
    except Exception:  # not in a Ray worker: the host alone says where
        return host


WireVector = tuple[str, Mapping[str, Any], int, str]  # op, params, index, id


def wire_vectors(vectors: Sequence[Vector]) -> list[WireVector]:
    """Vectors as plain tuples for the trip to a worker: smaller pickles, and the driver's
    vectors stay as they are (pickling an instance makes Python build its ``__dict__``, 64 bytes
    per vector kept for the whole run)."""
    return [(v.op, v.params, v.index, v.id) for v in vectors]


@dataclass(frozen=True)
class WorkerInfo:
    node: str
    device: str
    versions_json: str
    visible: dict[str, str]
    pid: int


@dataclass
class ChunkResult:
    """The rows of one chunk, each vector's status, and what the worker saw while running it."""

    rows: list[ResultRow]
    statuses: list[str]
    busy_s: float
    node: str
    visible: dict[str, str] = field(default_factory=dict)


class DeviceWorker:
    """Runs chunks of vectors on the one device this process was given."""

    def __init__(self, backend: str, backend_options: Mapping[str, Any],
                 ops_modules: Sequence[str], how: Measurement) -> None:
        for m in ops_modules:
            load_ops_module(m)
        self.backend_name, self.how = backend, how
        self.backend = get_backend(backend, **dict(backend_options))
        self.info_ = WorkerInfo(node_label(), self.backend.device_name(),
                                canonical_json(self.backend.versions()), visible_devices(),
                                os.getpid())
        self.builder = RowBuilder(backend, self.info_.device, self.info_.versions_json)
        # The guarded process is spawned from here, so it inherits this process's
        # CUDA_VISIBLE_DEVICES / TT_VISIBLE_DEVICES: it sees the one device Ray gave us. Ray
        # sets OMP_NUM_THREADS=1 here; a backend that says its thread count gets it instead,
        # so that it measures as the local runner does.
        threads = getattr(self.backend, "threads", None)
        if isinstance(threads, int):
            os.environ.update(thread_env(threads))
        self.worker = open_worker(self.backend, backend, ops_modules, backend_options)

    def info(self) -> WorkerInfo:
        return self.info_

    def run_chunks(self, chunks: Sequence[Sequence[WireVector]]) -> list[ChunkResult]:
        """One actor call, several chunks (the driver sizes calls so that fast vectors share
        one: Ray's cost per call is paid per call, not per chunk); a result per chunk."""
        return [self.run_chunk(chunk) for chunk in chunks]

    def run_chunk(self, chunk: Sequence[WireVector]) -> ChunkResult:
        how, t0 = self.how, time.monotonic()
        rows: list[ResultRow] = []
        statuses: list[str] = []
        for op, params, index, vector_id in chunk:
            vec = Vector(op=op, params=params, index=index, id=vector_id)
            outcome = self.worker.run(vec.op, vec.params, how.passes, how.repeats, how.warmup,
                                      how.timeout_s)
            rows.extend(self.builder.rows(vec, how.passes, outcome))
            statuses.append(outcome.status)
        return ChunkResult(rows, statuses, time.monotonic() - t0, self.info_.node,
                           visible_devices())

    def close(self) -> None:
        self.worker.close()
