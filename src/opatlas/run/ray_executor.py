"""``--executor ray``: one sweep over many machines, every device busy, one store.

The driver (this process) records the spec's vectors in the store batch by batch, starts one
:class:`DeviceWorker` actor per device of the cluster, and streams chunks of vectors to them,
at most ``calls_per_worker`` calls per actor, expanding them again as they are taken
(backpressure: a 2.9M-vector sweep never becomes 2.9M pending tasks, nor 2.9M vectors in the
driver's memory). Results come back as they finish (``ray.wait``) and only the driver writes
the DuckDB store, in batched transactions. An actor that dies (its node removed, its process
killed) loses nothing: its unfinished chunks go back to the queue and run on another actor; the
store ignores rows it already holds, so nothing is recorded twice. A driver killed mid-run
resumes from the store.

A chunk is the unit that is retried and recorded together (``--chunk``); a call carries as many
chunks as run for about ``call_s`` on that device type (measured as results come in), so a chunk
of one fast vector does not pay Ray's cost per call (about a millisecond of driver, actor and
messaging work) on its own, while a slow vector still travels alone and the last ones are
spread over every worker.

Why actors and not tasks: an actor holds its device for the whole sweep, so the backend, the
CUDA context or the Tenstorrent device, and the guarded worker process stay warm across chunks.
A task per chunk would re-create them (Ray does not reuse a GPU worker process across tasks by
default), and a hang would hold a task slot the scheduler cannot see. Retrying is done here:
a dead actor's chunk is re-queued for any live actor of the same device type, which a Ray
actor restart (``max_restarts``) cannot do when the node that held it is gone.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opatlas.errors import OpatlasError
from opatlas.run.plan import FAILED, SweepPlan, Work
from opatlas.run.progress import Progress
from opatlas.run.ray_worker import ChunkResult, DeviceWorker, WorkerInfo, wire_vectors
from opatlas.run.records import ResultWriter, RowBuilder
from opatlas.run.runner import (
    Measurement,
    NodeStats,
    RunConfig,
    RunSummary,
    check_field,
    measurement,
    prepare_run,
)
from opatlas.run.worker import Outcome
from opatlas.spec import SweepSpec
from opatlas.store import Store
from opatlas.sweep import Vector

INSTALL_HINT = ("the Ray executor needs Ray, which is not installed: pip install 'opatlas[ray]' "
                "(or pip install 'ray>=2.9'). Without it, run on one machine (--executor local) "
                "or split the sweep with --parts N --part K and merge with opatlas import results.")

# The device a backend's worker holds: Ray's name for the resource.
BACKEND_RESOURCE = {"cuda": "GPU", "ttnn": "TTNPU"}
# The variable Ray sets to pin a worker to its accelerator ids.
VISIBLE_VAR = {"GPU": "CUDA_VISIBLE_DEVICES", "TTNPU": "TT_VISIBLE_DEVICES"}


class RayUnavailable(OpatlasError):
    """Ray is not installed (the CLI exits 2 with the install command)."""


@dataclass
class RayConfig:
    """How to reach the cluster and how to cut the work."""

    address: str | None = None  # None: start Ray on this machine; "auto": the running cluster
    devices_per_task: int = 1   # devices each worker holds
    chunk: int = 16             # vectors per chunk: the unit retried and recorded together
    resource: str | None = None  # GPU, TTNPU, CPU or a custom resource; None: by backend
    calls_per_worker: int = 2   # actor calls in flight per worker: one runs, one waits
    call_s: float = 0.05        # a call carries the chunks that run about this long ...
    call_vectors: int = 1024    # ... and at most this many vectors (always one chunk at least)
    max_workers: int | None = None
    object_store_mb: int = 100  # for a Ray started here: small for laptops and CI
    num_cpus: int | None = None  # for a Ray started here
    chunk_attempts: int = 3     # a vector whose worker died this often is recorded as crash
    start_timeout_s: float = 300.0
    rescale_every_s: float = 5.0
    settle_s: float = 60.0      # nothing to run: wait this long for workers still starting

    def __post_init__(self) -> None:
        """Refuse a value that cannot work, naming the field (not a ZeroDivisionError later)."""
        least = {"devices_per_task": 1, "chunk": 1, "calls_per_worker": 1, "call_vectors": 1,
                 "max_workers": 1, "object_store_mb": 1, "num_cpus": 0, "chunk_attempts": 1,
                 "call_s": 0, "start_timeout_s": 0, "rescale_every_s": 0, "settle_s": 0}
        unset = {"max_workers": "one per device", "num_cpus": "the machine's"}
        for name, low in least.items():
            kind = float if isinstance(self.__dataclass_fields__[name].default, float) else int
            check_field(self, name, kind, low, none=unset.get(name))


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable(INSTALL_HINT) from None
    return ray


def device_resource(backend: str, override: str | None = None) -> str:
    """The Ray resource one worker of ``backend`` holds: GPU (cuda), TTNPU (ttnn), else CPU."""
    return override or BACKEND_RESOURCE.get(backend, "CPU")


def actor_resources(resource: str, count: int) -> dict[str, Any]:
    """Ray options that give an actor ``count`` units of ``resource`` and nothing else."""
    if resource == "CPU":
        return {"num_cpus": count}
    if resource == "GPU":
        return {"num_cpus": 0, "num_gpus": count}
    return {"num_cpus": 0, "resources": {resource: count}}


def shipped_ops_modules(ops_modules: Sequence[str]) -> tuple[list[str], list[str]]:
    """(files to ship in the runtime env's ``py_modules``, names the workers import).

    A ``.py`` file travels with the job and is imported by its stem on the workers, as does a
    package folder named by its bare name (``mypkg``, found in the current folder as ``--ops-module``
    finds it); a dotted module name must be importable on every node (installed there)."""
    files, names = [], []
    for m in ops_modules:
        p = Path(m)
        if p.is_dir() and (p / "__init__.py").is_file() and str(m).isidentifier():
            files.append(str(p.resolve()))
            names.append(str(m))
        elif p.suffix == ".py" or p.is_file():
            if not p.is_file():
                raise OpatlasError(f"--ops-module {m}: no such file")
            files.append(str(p.resolve()))
            names.append(p.stem)
        else:
            names.append(str(m))
    return files, names


# The client's side of HTTP/2's connection preface (RFC 9113, 3.4): the magic and an empty
# SETTINGS frame. Ray's GCS (and its client server, ray://) is a gRPC server, which answers at
# once with its own SETTINGS frame; a silent port, or a service that is not gRPC, does not.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
H2_SETTINGS = 4  # a SETTINGS frame's type: the fourth byte of the 9-byte frame header
START_HINT = ("start one there with `ray start --head --port {port}`, use --address auto on a "
              "node of a running cluster, or leave --address out to start Ray on this machine")


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT`` or ``ray://HOST:PORT`` (``[::1]:6379`` too); None for
    ``auto`` and any other form, which is left to Ray."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if "://" in rest or not sep or not host or not port.isdigit():
        return None
    return host.removeprefix("[").removesuffix("]"), int(port)


PROBE_TIMEOUT_S = 5.0  # how long a port that accepts may stay silent before it is not Ray


def check_reachable(address: str, timeout_s: float | None = None) -> None:
    """Fail within about ``timeout_s``, with one clear error, unless a gRPC server (as Ray's GCS
    is) answers at ``address``: ``ray.init`` itself retries a closed or silent port for minutes.
    ``auto`` and forms other than ``[ray://]HOST:PORT`` are left to Ray; with RAY_USE_TLS on,
    only the connection is checked (said on stderr)."""
    where = split_address(address)
    if where is None:
        return
    timeout_s = PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection(where, timeout=timeout_s)
    except OSError as exc:
        raise OpatlasError(f"--address {address}: nothing answers there ({exc}), so no Ray "
                           f"cluster answered; " + START_HINT.format(port=where[1])) from None
    with sock:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            print(f"opatlas: RAY_USE_TLS is on: only checked that {address} accepts "
                  f"connections, not that Ray answers there", file=sys.stderr)
            return
        why = _not_grpc(sock, deadline, timeout_s)
    if why:
        raise _no_cluster(address, where[1], why)


def _not_grpc(sock: socket.socket, deadline: float, timeout_s: float) -> str | None:
    """Why the server on ``sock`` is not a gRPC server (its answer to an HTTP/2 client
    preface, by ``deadline``, is not a SETTINGS frame); None when it is one."""
    got = b""
    try:
        sock.sendall(H2_PREFACE)
        while len(got) < 9:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            part = sock.recv(9 - len(got))
            if not part:
                return f"the port accepts connections, then closes them: not Ray ({got!r})"
            got += part
    except TimeoutError:
        if not got:
            return (f"the port accepts connections but nothing answered within {timeout_s:g} s: "
                    f"not a Ray head's port? (6379 unless `ray start --port` said otherwise)")
    except OSError as exc:
        return f"the port accepts connections, then fails them: not Ray ({exc})"
    if len(got) < 9 or got[3] != H2_SETTINGS:
        return f"what answers there does not speak gRPC, so it is not Ray: {got!r}"
    return None


def _no_cluster(address: str, port: int, why: str) -> OpatlasError:
    return OpatlasError(f"--address {address}: no Ray cluster answered there ({why}); "
                        + START_HINT.format(port=port))


def connect(ray: Any, cfg: RayConfig, ship: Sequence[str] = ()) -> bool:
    """Connect to (or start) Ray, with the files in ``ship`` in the job's runtime env
    (``py_modules``); True when this call connected, so the caller shuts it down.

    When the caller already initialised Ray, its job's runtime env stays as it is: the files
    must be in it (``ray.init(runtime_env={"py_modules": [...]})``), which is said on stderr."""
    if ray.is_initialized():
        if ship:
            print(f"opatlas: Ray was initialised before this run; the op module(s) {list(ship)} "
                  f"reach the workers only if that ray.init shipped them (py_modules)",
                  file=sys.stderr)
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    runtime_env = {"py_modules": list(ship)} if ship else None
    if cfg.address:
        check_reachable(cfg.address)
        try:
            ray.init(address=cfg.address, runtime_env=runtime_env, log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise OpatlasError(f"--address {cfg.address}: cannot reach a Ray cluster there "
                               f"({_short(exc)}); start one with `ray start --head`, or leave "
                               f"--address out to start Ray on this machine") from None
    else:
        start_private_ray(ray, cfg, runtime_env)
    return True


def start_private_ray(ray: Any, cfg: RayConfig, runtime_env: dict[str, Any] | None) -> None:
    """Start Ray on this machine for this run only (``address="local"``): without it, Ray
    joins a cluster already running here or named by RAY_ADDRESS, and refuses the object store
    size given for a new one."""
    if os.environ.get("RAY_ADDRESS"):
        print(f"opatlas: RAY_ADDRESS={os.environ['RAY_ADDRESS']} is ignored without --address: "
              f"starting Ray on this machine for this run (--address auto joins that cluster)",
              file=sys.stderr)
    try:
        ray.init(address="local", num_cpus=cfg.num_cpus,
                 object_store_memory=cfg.object_store_mb * 2**20, include_dashboard=False,
                 runtime_env=runtime_env, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise OpatlasError(f"--executor ray: cannot start Ray on this machine ({_short(exc)}); "
                           f"join a running cluster with --address auto or HOST:PORT") from None


@dataclass
class _Slot:
    """A live actor, what it is, and how many calls it has in flight."""

    handle: Any
    info: WorkerInfo
    in_flight: int = 0


@dataclass
class _Chunk:
    device: str
    vectors: list[Vector]
    attempts: int = 0
    last_error: str = ""


@dataclass
class _Call:
    """An actor call in flight: the actor and the chunks it runs, in the order sent."""

    slot: _Slot
    chunks: list[_Chunk]
    seq: int = 0  # the order of sending: an actor runs its calls in this order


@dataclass
class _Pace:
    """How long a chunk of one device type runs (a moving average of what its workers
    report), hence how many chunks one call carries; one until a result says."""

    chunk_s: float | None = None

    def update(self, busy_s: float, chunks: int) -> None:
        seconds = busy_s / max(1, chunks)
        self.chunk_s = seconds if self.chunk_s is None else 0.8 * self.chunk_s + 0.2 * seconds

    def chunks_per_call(self, call_s: float, most: int) -> int:
        if self.chunk_s is None:
            return 1
        return max(1, min(most, math.ceil(call_s / max(self.chunk_s, 1e-6))))


class _ChunkQueue:
    """A device type's chunks: those to run again first, then the next ones of its
    :class:`Work`, expanded only as they are taken (one chunk is read ahead, to know whether
    any is left)."""

    def __init__(self, device: str, work: Work, size: int) -> None:
        self.device, self.size = device, size
        self.again: deque[_Chunk] = deque()
        self.pace = _Pace()
        self.fresh = work.todo  # vectors not taken yet (the chunk read ahead included)
        self._source = work.chunks(size)
        self._next = self._read()

    def _read(self) -> _Chunk | None:
        vectors = next(self._source, None)
        return None if vectors is None else _Chunk(self.device, vectors)

    def __bool__(self) -> bool:
        return bool(self.again) or self._next is not None

    def pop(self) -> _Chunk:
        if self.again:
            return self.again.popleft()
        chunk = self._next
        if chunk is None:
            raise IndexError("no chunk left")
        self._next = self._read()
        self.fresh -= len(chunk.vectors)
        return chunk

    def chunks_left(self) -> int:
        return len(self.again) + math.ceil(max(0, self.fresh) / self.size)

    def take(self, most: int) -> list[_Chunk]:
        """The chunks of the next call: a chunk run again goes alone (if it is what killed its
        worker, it takes no other chunk down with it), else up to ``most`` new ones."""
        if self.again:
            return [self.again.popleft()]
        return [self.pop() for _ in range(most) if self]


class RayDispatcher:
    """Streams chunks to device actors and their results into the store."""

    def __init__(self, ray: Any, store: Store, plan: SweepPlan, config: RunConfig,
                 ray_config: RayConfig,
                 on_result: Callable[[ChunkResult], None] | None = None) -> None:
        """``on_result`` is called with every chunk's result once it is recorded."""
        self.on_result = on_result
        self.ray, self.store, self.plan, self.spec = ray, store, plan, plan.spec
        self.cfg, self.rcfg = config, ray_config
        self.how: Measurement = measurement(plan.spec, config)
        self.resource = device_resource(config.backend, ray_config.resource)
        _, names = shipped_ops_modules(config.ops_modules)
        options = actor_resources(self.resource, ray_config.devices_per_task)
        self.actor_cls = ray.remote(DeviceWorker).options(max_restarts=0, max_task_retries=0,
                                                           **options)
        self.actor_args = (config.backend, dict(config.backend_options), names, self.how)
        self.slots: dict[Any, _Slot] = {}       # actor id -> live actor
        self.starting: dict[Any, Any] = {}      # info() ref -> actor handle
        self.calls: dict[Any, _Call] = {}  # call ref -> what it runs
        self.sent = 0  # calls sent so far (their sequence numbers)
        self.queues: dict[str, _ChunkQueue] = {}
        self.todo = 0  # vectors to run, over every device type found so far
        self.groups: dict[str, WorkerInfo] = {}  # device name -> the first worker's info
        self.summary = RunSummary()
        self.start_errors: list[str] = []
        self.warned_visible = False
        self.progress: Progress | None = None
        self.writer = ResultWriter(store, 8 * config.flush_every, config.flush_seconds)

    # -- workers ------------------------------------------------------------------------------
    def target_workers(self) -> int:
        total = self.ray.cluster_resources().get(self.resource, 0.0)
        count = int(total // self.rcfg.devices_per_task)
        return min(count, self.rcfg.max_workers) if self.rcfg.max_workers else count

    def scale(self) -> None:
        """Start workers until there is one per free device of the cluster (also after a node
        joined, or to replace a worker that died)."""
        for _ in range(self.target_workers() - len(self.slots) - len(self.starting)):
            handle = self.actor_cls.remote(*self.actor_args)
            self.starting[handle.info.remote()] = handle

    def _started(self, ref: Any) -> None:
        handle = self.starting.pop(ref)
        try:
            info: WorkerInfo = self.ray.get(ref)
        except Exception as exc:  # the actor could not start (backend missing, node gone)
            self.start_errors.append(_short(exc))
            self.ray.kill(handle)
            return
        self.slots[_key(handle)] = _Slot(handle, info)
        self._check_visible(info)
        if info.device not in self.groups:
            self._new_group(info)

    def _check_visible(self, info: WorkerInfo) -> None:
        """Say so (once) when Ray did not pin the device: the worker would see every card."""
        var = VISIBLE_VAR.get(self.resource)
        if var and var not in info.visible and not self.warned_visible:
            self.warned_visible = True
            print(f"opatlas: warning: Ray did not set {var} for the worker on {info.node} "
                  f"(Ray older than 2.60 for TTNPU, or a RAY_EXPERIMENTAL_NOSET_* variable); "
                  f"it may see every device of its node", file=sys.stderr)

    def _new_group(self, info: WorkerInfo) -> None:
        """The first worker of a device type: what that device still has to run (resume)."""
        self.groups[info.device] = info
        self.writer.flush()
        work = self.plan.work(self.store, self.cfg.backend, info.device, self.cfg.retry_failed)
        self.summary.total += work.total
        self.summary.skipped += work.skipped
        self.summary.failed_earlier.update(work.failed)
        self.todo += work.todo
        # A sweep shorter than a chunk per worker is cut so that every worker gets one.
        size = min(self.rcfg.chunk, math.ceil(work.todo / max(1, self.target_workers())))
        self.queues[info.device] = _ChunkQueue(info.device, work, max(1, size))
        if self.progress is not None:
            self.progress.grow(work.todo)

    def _drop(self, slot: _Slot) -> None:
        self.slots.pop(_key(slot.handle), None)
        with contextlib.suppress(Exception):  # already gone with its node
            self.ray.kill(slot.handle)

    # -- chunks -------------------------------------------------------------------------------
    def submit(self) -> None:
        """Keep up to ``calls_per_worker`` calls in flight on every live actor: a first call on
        each before a second on any, and no second call while the chunks left would not give
        each worker still starting one (else the first worker up takes a short sweep alone)."""
        for depth in range(1, max(1, self.rcfg.calls_per_worker) + 1):
            for slot in list(self.slots.values()):
                queue = self.queues.get(slot.info.device)
                if not queue or slot.in_flight >= depth:
                    continue
                if depth > 1 and queue.chunks_left() <= len(self.starting):
                    continue
                self._send(slot, queue)

    def _send(self, slot: _Slot, queue: _ChunkQueue) -> None:
        """One call: the chunks that run about ``call_s``, at most an even share of what is
        left among the workers of the device type (the last chunks are spread over all)."""
        most = max(1, self.rcfg.call_vectors // queue.size)
        workers = len(self.starting) + sum(s.info.device == queue.device
                                           for s in self.slots.values())
        share = math.ceil(queue.chunks_left() / max(1, workers))
        chunks = queue.take(max(1, min(share, queue.pace.chunks_per_call(self.rcfg.call_s,
                                                                         most))))
        ref = slot.handle.run_chunks.remote([wire_vectors(c.vectors) for c in chunks])
        self.calls[ref] = _Call(slot, chunks, self.sent)
        self.sent += 1
        slot.in_flight += 1

    def _finished(self, ref: Any) -> None:
        call = self.calls.pop(ref, None)
        if call is None:  # lost with its worker, already put back by _worker_lost
            return
        call.slot.in_flight -= 1
        try:
            results: list[ChunkResult] = self.ray.get(ref)
        except Exception as exc:  # the actor or its node died: the chunks run again elsewhere
            self._worker_lost(call, _short(exc))
            return
        self._done(call, results)

    def _done(self, call: _Call, results: list[ChunkResult]) -> None:
        self.queues[call.slot.info.device].pace.update(sum(r.busy_s for r in results),
                                                       len(results))
        self._record(results)
        if self.on_result is not None:
            for result in results:
                self.on_result(result)

    def _worker_lost(self, call: _Call, error: str) -> None:
        """The actor of ``call`` died: every call it had in flight goes back to the front of
        the queue. Only the oldest unfinished one was running (an actor runs its calls in
        order), so only its chunks may hold what killed the worker; the others never started
        and go back as they were. A call that ended before the death, its answer not read yet,
        is recorded as it ended: blaming it (the oldest in flight) would charge a vector that
        ran fine with its neighbour's crash."""
        self._drop(call.slot)
        others = [r for r, c in self.calls.items() if c.slot is call.slot]
        for ref, results in self._answered(others):
            ended = self.calls.pop(ref)
            ended.slot.in_flight -= 1
            self._done(ended, results)
        others = [r for r, c in self.calls.items() if c.slot is call.slot]
        lost = sorted([call, *(self.calls.pop(r) for r in others)], key=lambda c: c.seq)
        for queued in reversed(lost[1:]):
            for chunk in reversed(queued.chunks):
                self.summary.retried_chunks += 1
                self.queues[chunk.device].again.appendleft(chunk)
        for chunk in reversed(lost[0].chunks):  # at the very front, in their order
            self._retry(chunk, error)

    def _answered(self, refs: list[Any]) -> list[tuple[Any, list[ChunkResult]]]:
        """The calls of ``refs`` that had ended with an answer (read now), in their order."""
        if not refs:
            return []
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        answered = []
        for ref in ready:
            try:
                answered.append((ref, self.ray.get(ref)))
            except Exception:  # died with the worker: lost, as the caller handles it
                continue
        return sorted(answered, key=lambda a: self.calls[a[0]].seq)

    def _retry(self, chunk: _Chunk, error: str) -> None:
        """Run again a chunk that was running when its worker died. A chunk of several vectors
        comes back as one chunk per vector (each then runs in a call of its own), so the vector
        that kills its worker is the only one that dies again, and the only one recorded as
        crash once its worker died ``chunk_attempts`` times."""
        self.summary.retried_chunks += 1
        again = self.queues[chunk.device].again
        if len(chunk.vectors) > 1:
            again.extendleft(_Chunk(chunk.device, [v], chunk.attempts + 1, error)
                             for v in reversed(chunk.vectors))
            return
        chunk.attempts += 1
        chunk.last_error = error
        if chunk.attempts < self.rcfg.chunk_attempts:
            again.appendleft(chunk)
            return
        info = self.groups[chunk.device]  # recorded, never dropped: say why
        builder = RowBuilder(self.cfg.backend, info.device, info.versions_json)
        outcome = Outcome("crash", message=f"the Ray worker running this vector died "
                                           f"{chunk.attempts} times; last: {error}"[:2000])
        rows = [r for v in chunk.vectors for r in builder.rows(v, self.how.passes, outcome)]
        self._record([ChunkResult(rows, ["crash"] * len(chunk.vectors), 0.0, "(lost)")])

    def _record(self, results: list[ChunkResult]) -> None:
        statuses: Counter[str] = Counter()
        for result in results:
            self.writer.add(result.rows)
            node = self.summary.nodes.setdefault(result.node, NodeStats())
            node.vectors += len(result.statuses)
            node.failures += sum(s in FAILED for s in result.statuses)
            node.busy_s += result.busy_s
            node.devices.update(f"{k}={v}" for k, v in result.visible.items())
            statuses.update(result.statuses)
        self.summary.ran += statuses.total()
        self.summary.statuses.update(statuses)
        if self.progress is not None:
            detail = " ".join(f"{n.split('/')[-1]}:{s.vectors}"
                              for n, s in sorted(self.summary.nodes.items()))
            for status, count in statuses.items():
                self.progress.advance(status, count, detail)

    # -- the loop -----------------------------------------------------------------------------
    def _wait_for_first_worker(self) -> None:
        self.scale()
        if not self.starting:
            raise OpatlasError(
                f"the Ray cluster has no free {self.resource!r} resource for a worker holding "
                f"{self.rcfg.devices_per_task} of them (cluster: "
                f"{self.ray.cluster_resources()}); use --ray-resource or --devices-per-task")
        deadline = time.monotonic() + self.rcfg.start_timeout_s
        while not self.slots:
            if not self.starting:
                raise OpatlasError("no Ray worker could start: " + "; ".join(self.start_errors))
            if time.monotonic() > deadline:
                raise OpatlasError(f"no Ray worker started within {self.rcfg.start_timeout_s:g} s "
                                   f"(is the {self.resource!r} resource held by another job?)")
            ready, _ = self.ray.wait(list(self.starting), num_returns=1, timeout=1.0)
            for ref in ready:
                self._started(ref)

    def _work_left(self, settle_until: float) -> bool:
        """Calls in flight or chunks to send; or, while nothing ran, workers still starting:
        they may hold another device type (a resume whose first type is done), so they are
        waited for (at most ``settle_s``) rather than left with a note."""
        if self.calls or any(self.queues.values()):
            return True
        return bool(self.starting) and self.summary.ran == 0 and time.monotonic() < settle_until

    def run(self) -> RunSummary:
        t0 = time.monotonic()
        finished = False
        try:
            self._wait_for_first_worker()
            label = f"{self.spec.name} on {self.cfg.backend} (ray)"
            with self.writer, Progress(self.todo, label=label, interactive=self.cfg.interactive,
                                       log_every=self.cfg.log_every) as self.progress:
                self._loop()
            finished = True
        finally:
            self._shutdown_workers(finished)
            self.summary.elapsed_s = time.monotonic() - t0
            self.summary.duplicate_rows = self.writer.ignored
        return self.summary

    def _loop(self) -> None:
        last_scale = time.monotonic()
        stalled_since: float | None = None
        settle_until = time.monotonic() + self.rcfg.settle_s
        while self._work_left(settle_until):
            self.submit()
            for ref in self._ready():
                if ref in self.starting:
                    self._started(ref)
                else:
                    self._finished(ref)
            self.writer.add(())  # a time-based flush while chunks are long
            if time.monotonic() - last_scale >= self.rcfg.rescale_every_s:
                self.scale()
                last_scale = time.monotonic()
            if self.slots:
                stalled_since = None
            elif stalled_since is None:
                stalled_since = time.monotonic()
                self.scale()
            elif time.monotonic() - stalled_since > self.rcfg.start_timeout_s:
                raise OpatlasError(
                    f"every Ray worker is gone and none restarted within "
                    f"{self.rcfg.start_timeout_s:g} s; the results so far are in the store, run "
                    f"the same command again to resume. Last errors: "
                    + "; ".join(self.start_errors[-3:]))

    def _ready(self) -> list[Any]:
        """Every call and start-up that has finished: waits for one (at most 1 s), then takes
        all others already done, so small chunks cost one wait each, not one loop each."""
        refs = [*self.calls, *self.starting]
        if not refs:
            return []
        ready, rest = self.ray.wait(refs, num_returns=1, timeout=1.0)
        if ready and rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return ready

    def _shutdown_workers(self, finished: bool) -> None:
        """Close the idle workers of a finished sweep (their guarded processes end cleanly);
        after Ctrl-C or an error, kill them at once: a close would wait behind their calls."""
        if finished and self.starting:
            seen = ", ".join(self.groups) or "no device yet"
            print(f"opatlas: note: the work for {seen} ran out while {len(self.starting)} more "
                  f"Ray worker(s) were still starting; if they hold another device type, run "
                  f"the same command again to measure it there", file=sys.stderr)
        handles = [s.handle for s in self.slots.values()] + list(self.starting.values())
        closing = [s.handle.close.remote() for s in self.slots.values()] if finished else []
        if closing:
            self.ray.wait(closing, num_returns=len(closing), timeout=10.0)
        for handle in handles:
            with contextlib.suppress(Exception):  # already dead
                self.ray.kill(handle)
        self.slots.clear()
        self.starting.clear()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAISED = re.compile(r"^[A-Za-z_][\w.]*: \S")  # a traceback's last line: "module.Error: message"


def _short(exc: BaseException) -> str:
    """One line for ``exc``: its first line, or, when Ray wrapped a worker's traceback (an
    actor whose ``__init__`` raised), the innermost exception's own message."""
    while isinstance(getattr(exc, "cause", None), BaseException):  # a task's RayTaskError
        exc = exc.cause
    lines = [line.strip() for line in _ANSI.sub("", str(exc)).splitlines() if line.strip()]
    said = lines[0] if lines else ""
    if any(line.startswith('File "') for line in lines) and _RAISED.match(lines[-1]):
        name, _, message = lines[-1].partition(": ")
        said = f"{name.rsplit('.', 1)[-1]}: {message}"
    return f"{type(exc).__name__}: {said}"[:500]


def run_spec_ray(spec: SweepSpec, store: Store, config: RunConfig | None = None,
                 ray_config: RayConfig | None = None, *, parts: int = 1, part: int = 1,
                 where: str | None = None) -> RunSummary:
    """Like :func:`opatlas.run.run_spec`, with the vectors run by Ray workers across a cluster.

    The driver alone writes ``store``; re-running the same call resumes from it."""
    ray = import_ray()
    config = config or RunConfig()
    ray_config = ray_config or RayConfig()
    if ray_config.address and not ray.is_initialized():
        check_reachable(ray_config.address)  # before the sweep is recorded in the store
    plan = prepare_run(spec, store, config, parts=parts, part=part, where=where)
    started = connect(ray, ray_config, shipped_ops_modules(config.ops_modules)[0])
    try:
        return RayDispatcher(ray, store, plan, config, ray_config).run()
    finally:
        if started:
            ray.shutdown()


def _key(handle: Any) -> str:
    return handle._actor_id.hex()
