"""``--executor submitit``: a sweep as a SLURM job array, for sites without a Ray cluster.

The driver (this process) records the spec's vectors in the store, writes the keys of what the
store already holds per device (``done.npz``, so a job skips them whatever device it lands on),
and submits one array of ``jobs`` tasks through submitit. Task ``k`` runs the local runner on
part ``k`` of ``jobs`` into a DuckDB file of its own (``part-k.duckdb``, resumable if the task
is re-run) and, when done, writes its results as a Parquet shard (``part-k.parquet``, renamed
into place whole). The driver merges each shard as its task ends; the store ignores rows it
already holds, so nothing is recorded twice. Only the driver opens the store.

A task that dies (time limit, node failure, preemption) leaves its DuckDB file: the driver
recovers what it holds and says so; running the same command again runs the rest. A driver
killed mid-run loses nothing either: the next run merges the shards the tasks left in the
folder before it looks at what is still to do.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from opatlas.errors import OpatlasError
from opatlas.run.plan import RESUMABLE
from opatlas.run.runner import NodeStats, RunConfig, Runner, RunSummary, prepare_run
from opatlas.spec import SweepSpec
from opatlas.store import Store

INSTALL_HINT = ("the submitit executor needs submitit, which is not installed: "
                "pip install 'opatlas[slurm]' (or pip install submitit). Without it, split the "
                "sweep with --parts N --part K and merge with opatlas import results.")
CLUSTERS = ("slurm", "local", "debug")
DONE_FILE = "done.npz"


@dataclass
class SubmititConfig:
    jobs: int = 4
    folder: Path = Path("opatlas-submitit")
    cluster: str | None = None  # None: SLURM where sbatch exists, else local processes
    poll_s: float = 2.0
    parameters: dict[str, Any] = field(default_factory=dict)  # submitit's, e.g. slurm_partition


@dataclass(frozen=True)
class PartReport:
    """What one array task did: its part, where it ran, what it ran."""

    part: int
    host: str
    device: str
    summary: RunSummary


def import_submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise OpatlasError(INSTALL_HINT) from None
    return submitit


def shard_paths(folder: Path, part: int) -> tuple[Path, Path]:
    """(the task's own DuckDB file, the Parquet shard it writes when done)."""
    return folder / f"part-{part}.duckdb", folder / f"part-{part}.parquet"


def run_part(spec: SweepSpec, config: RunConfig, jobs: int, part: int, where: str | None,
             folder: str) -> PartReport:
    """One array task: part ``part`` of ``jobs`` on this node's device, less what the driver's
    store held for that device, into the task's own store; then its Parquet shard."""
    db, shard = shard_paths(Path(folder), part)
    with Store(db) as st:
        plan = prepare_run(spec, st, config, parts=jobs, part=part, where=where)
        runner = Runner(st, config)
        summary = runner.run(plan, also_done=_driver_done(Path(folder), runner.device))
        _export(st, shard)
    return PartReport(part, socket.gethostname(), runner.device, summary)


def _driver_done(folder: Path, device: str) -> np.ndarray | None:
    with np.load(folder / DONE_FILE) as done:
        return done[device] if device in done.files else None


def _export(store: Store, shard: Path) -> None:
    tmp = shard.with_name(f".{shard.name}.{os.getpid()}.tmp.parquet")
    store.export(tmp)
    os.replace(tmp, shard)  # a reader sees a whole shard or none


def run_spec_submitit(spec: SweepSpec, store: Store, config: RunConfig | None = None,
                      sconfig: SubmititConfig | None = None, *,
                      where: str | None = None) -> RunSummary:
    """Like :func:`opatlas.run.run_spec`, with the vectors run by a submitit job array."""
    submitit = import_submitit()
    config = config or RunConfig()
    sconfig = sconfig or SubmititConfig()
    folder = sconfig.folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    summary = RunSummary()
    summary.duplicate_rows = merge_leftovers(store, folder)
    plan = prepare_run(spec, store, config, where=where)
    earlier = {d: plan.work(store, config.backend, d, config.retry_failed).failed
               for d in _devices(store, config.backend)}  # before the tasks add theirs
    _write_done(store, config, folder, plan.passes)
    executor = _executor(submitit, sconfig, folder)
    n = sconfig.jobs
    jobs = executor.map_array(run_part, [spec] * n, [config] * n, [n] * n, range(1, n + 1),
                              [where] * n, [str(folder)] * n)
    _say(f"submitted {n} task(s) as job {jobs[0].job_id.split('_')[0]} "
         f"({executor.cluster}); logs in {folder / 'logs'}")
    _collect(store, jobs, folder, summary, sconfig.poll_s)
    for device in {d for node in summary.nodes.values() for d in node.devices}:
        summary.failed_earlier.update(earlier.get(device, {}))
    summary.total = plan.valid
    summary.elapsed_s = time.monotonic() - t0
    return summary


def _write_done(store: Store, config: RunConfig, folder: Path, passes: Sequence[str]) -> None:
    statuses = RESUMABLE if config.retry_failed else None
    done = {d: store.done_keys(config.backend, d, statuses, passes)
            for d in _devices(store, config.backend)}
    tmp = folder / f".{DONE_FILE}.{os.getpid()}.tmp.npz"
    np.savez(tmp, **done)
    os.replace(tmp, folder / DONE_FILE)


def _devices(store: Store, backend: str) -> list[str]:
    """The devices the store holds results of ``backend`` on."""
    return [d for (d,) in store.con.execute("SELECT DISTINCT device FROM results WHERE "
                                            "backend = ?", [backend]).fetchall()]


def _executor(submitit: Any, sconfig: SubmititConfig, folder: Path) -> Any:
    if sconfig.cluster is not None and sconfig.cluster not in CLUSTERS:
        raise OpatlasError(f"--submitit-cluster {sconfig.cluster!r}: expected one of "
                           f"{', '.join(CLUSTERS)}")
    executor = submitit.AutoExecutor(folder=folder / "logs", cluster=sconfig.cluster)
    try:
        executor.update_parameters(**sconfig.parameters)
    except (TypeError, ValueError, NameError) as exc:
        raise OpatlasError(f"--submitit-opt: {exc}") from None
    return executor


def _collect(store: Store, jobs: Sequence[Any], folder: Path, summary: RunSummary,
             poll_s: float) -> None:
    """Merge each task's shard as the task ends, until all have ended."""
    pending = dict(enumerate(jobs, start=1))
    while pending:
        for part, job in list(pending.items()):
            if job.done():
                del pending[part]
                _finish(store, job, part, folder, summary)
        if pending:
            time.sleep(poll_s)
    _say(f"all {len(jobs)} task(s) ended; "
         f"{sum(n.vectors for n in summary.nodes.values())} vectors run")


def _finish(store: Store, job: Any, part: int, folder: Path, summary: RunSummary) -> None:
    try:
        report: PartReport = job.result()
    except Exception as exc:  # submitit re-raises the task's failure, or its scheduler's
        text = str(exc).strip().splitlines()
        _say(f"task {part} failed ({type(exc).__name__}: {text[-1] if text else ''}); "
             f"recovering what it recorded; run the same command again to run the rest")
        summary.duplicate_rows += _merge(store, *shard_paths(folder, part))
        return
    summary.duplicate_rows += _merge(store, *shard_paths(folder, part))
    s = report.summary
    summary.ran += s.ran
    summary.skipped += s.skipped
    summary.statuses.update(s.statuses)
    node = summary.nodes.setdefault(f"{report.host}/part-{part}", NodeStats())
    node.vectors += s.ran
    node.failures += sum(v for k, v in s.statuses.items() if k not in RESUMABLE)
    node.busy_s += s.elapsed_s
    node.devices.add(report.device)
    _say(f"task {part} on {report.host}: {s.ran} vectors in {s.elapsed_s:.1f} s")


def _merge(store: Store, db: Path, shard: Path) -> int:
    """Import a task's shard (or, when it died before writing one, its own store) into the
    driver's store, then remove both; returns the rows the store held already."""
    if not shard.exists():
        if not db.exists():
            return 0
        try:
            with Store(db) as part_store:  # read-write: a killed task's WAL is replayed
                _export(part_store, shard)
        except Exception as exc:  # still open in a live task, or cut short mid-write
            _say(f"{db}: cannot read it now ({type(exc).__name__}); it stays for the next run")
            return 0
    rows = _parquet_rows(shard)
    added = store.import_results(shard)
    shard.unlink()
    db.unlink(missing_ok=True)
    db.with_name(db.name + ".wal").unlink(missing_ok=True)
    return rows - added


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def merge_leftovers(store: Store, folder: Path) -> int:
    """Shards a previous driver did not merge (it was killed, or a task outlived it)."""
    parts = sorted({int(p.stem.split("-")[1]) for p in folder.glob("part-*.*")
                    if p.stem.split("-")[1].isdigit()})
    if parts:
        _say(f"merging {len(parts)} shard(s) left in {folder} by an earlier run")
    return sum(_merge(store, *shard_paths(folder, k)) for k in parts)


def _say(text: str) -> None:
    print(f"opatlas: submitit: {text}", file=sys.stderr, flush=True)
