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
import re
import shutil
import socket
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from opatlas.console import counted
from opatlas.errors import OpatlasError
from opatlas.pool import usable_cores
from opatlas.run.plan import RESUMABLE, SweepPlan
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
    """Like :func:`opatlas.run.run_spec`, with the vectors run by a submitit job array. A
    task that failed is named in ``failed_tasks``, and the vectors it left in ``not_run``."""
    submitit = import_submitit()
    config = config or RunConfig()
    sconfig = sconfig or SubmititConfig()
    folder = sconfig.folder.resolve()
    made = not folder.exists()
    try:  # a refused option leaves no folder behind
        executor = _executor(submitit, sconfig, folder)
    except OpatlasError:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    summary = RunSummary()
    summary.duplicate_rows = merge_leftovers(store, folder)
    n = sconfig.jobs
    plan = prepare_run(spec, store, config, where=where, split=n)
    earlier = {d: plan.work(store, config.backend, d, config.retry_failed).failed
               for d in _devices(store, config.backend)}  # before the tasks add theirs
    if (device := _all_done_here(executor, store, config, plan)) is not None:
        _say(f"the store holds every vector of this sweep for {config.backend} on {device} "
             f"(the tasks' device: they run on this machine); nothing to submit")
        summary.total = summary.skipped = plan.valid
        summary.failed_earlier.update(earlier.get(device, {}))
        summary.elapsed_s = time.monotonic() - t0
        return summary
    _write_done(store, config, folder, plan.passes)
    parts = parts_to_submit(plan.part_sizes, where)
    jobs = executor.map_array(run_part, [spec] * len(parts), [config] * len(parts),
                              [n] * len(parts), parts, [where] * len(parts),
                              [str(folder)] * len(parts))
    _say(f"submitted {len(parts)} task(s) as job {jobs[0].job_id.split('_')[0]} "
         f"({executor.cluster}); logs in {folder / 'logs'}")
    _collect(store, dict(zip(parts, jobs, strict=True)), folder, summary, sconfig.poll_s)
    for device in {d for node in summary.nodes.values() for d in node.devices}:
        summary.failed_earlier.update(earlier.get(device, {}))
    summary.total = plan.valid
    if summary.failed_tasks:
        _count_not_run(store, plan, config.backend, summary)
    summary.elapsed_s = time.monotonic() - t0
    return summary


def parts_to_submit(sizes: Sequence[int], where: str | None) -> list[int]:
    """The parts (1-based) that hold a vector; says on stderr which hold none, or when the
    split is very unbalanced: parts take every ``len(sizes)``-th grid point, and a
    ``--where`` can select points that fall mostly in a few of them."""
    n = len(sizes)
    full = [k for k, size in enumerate(sizes, start=1) if size]
    if len(full) < n:
        empty = [k for k in range(1, n + 1) if k not in full]
        _say(f"part(s) {_ranges(empty)} of {n} hold no vector"
             f"{' of this --where' if where else ''} (the sweep is split by grid position: "
             f"every {n}th point); submitting {counted(len(full), 'task')}, not {n}"
             f"{'; fewer --jobs split it more evenly' if where else ''}")
    held = [sizes[k - 1] for k in full]
    if len(held) > 1 and max(held) > UNBALANCED * min(held):
        _say(f"the parts are unbalanced: {min(held):,} to {max(held):,} vectors per task "
             f"(split by grid position); the largest task sets the run's time")
    return full


UNBALANCED = 2  # the largest part over this times the smallest is said on stderr


def _ranges(numbers: Sequence[int]) -> str:
    """1, 3, 4, 5 -> "1, 3-5"."""
    out: list[str] = []
    for k in numbers:
        if out and out[-1].split("-")[-1] == str(k - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{k}"
        else:
            out.append(str(k))
    return ", ".join(out)


def _count_not_run(store: Store, plan: SweepPlan, backend: str, summary: RunSummary) -> None:
    """After a task failed: the vectors no task got to, on the devices the run used (they
    run on the same command again); the rest of those not run here were skipped."""
    devices = {d for node in summary.nodes.values() for d in node.devices}
    devices = devices or set(_devices(store, backend))
    summary.not_run = plan.left(store, backend, sorted(devices)) if devices else \
        plan.valid - summary.ran - summary.skipped
    summary.skipped = max(0, plan.valid - summary.ran - summary.not_run)


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
    if sconfig.cluster == "slurm" and shutil.which("srun") is None:
        raise OpatlasError("--submitit-cluster 'slurm': no SLURM here (no srun on PATH); "
                           "--submitit-cluster local runs the tasks on this machine")
    try:
        executor = submitit.AutoExecutor(folder=folder / "logs", cluster=sconfig.cluster)
    except (RuntimeError, ValueError) as exc:  # e.g. SLURM's commands fail
        raise OpatlasError(f"--submitit-cluster {sconfig.cluster!r}: "
                           f"{_one_line(exc)}") from None
    try:  # submitit asserts the types of its parameters
        executor.update_parameters(**sconfig.parameters)
    except (TypeError, ValueError, NameError, AssertionError) as exc:
        raise OpatlasError(f"--submitit-opt: {_one_line(exc)}") from None
    if sconfig.cluster is None and executor.cluster != "slurm":
        why = "no srun on PATH" if shutil.which("srun") is None else "submitit found none"
        _say(f"warning: no SLURM here ({why}): the {counted(sconfig.jobs, 'task')} run at "
             f"once as processes on this machine (submitit's {executor.cluster} cluster), "
             f"sharing its {counted(usable_cores(), 'CPU core')}"
             + (": CPU timings then contend for its cores (--jobs 1 does not)"
                if sconfig.jobs > 1 else "")
             + "; --submitit-cluster local says so, --submitit-cluster slurm requires SLURM")
    return executor


def _one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _all_done_here(executor: Any, store: Store, config: RunConfig, plan: SweepPlan
                   ) -> str | None:
    """The device the tasks run on, where the store holds every vector of ``plan`` for it:
    known only where they run on this machine (a SLURM task's device is its node's)."""
    if executor.cluster == "slurm" or not _devices(store, config.backend):
        return None
    from opatlas.backends import get_backend

    try:
        device = get_backend(config.backend, **config.backend_options).device_name()
    except OpatlasError:  # cannot run here: the tasks say why
        return None
    work = plan.work(store, config.backend, device, config.retry_failed)
    return device if work.todo == 0 else None


def _collect(store: Store, jobs: dict[int, Any], folder: Path, summary: RunSummary,
             poll_s: float) -> None:
    """Merge each task's shard as the task ends, until all have ended (``jobs``: by part)."""
    pending = dict(jobs)
    failures: dict[int, Failure] = {}
    while pending:
        for part, job in list(pending.items()):
            if job.done():
                del pending[part]
                _finish(store, job, part, folder, summary, failures)
        if pending:
            time.sleep(poll_s)
    reasons = {f.reason for f in failures.values()}
    failed = (f", {len(failures)} failed" if failures else "") + \
        (" the same way" if len(failures) > 1 and len(reasons) == 1 else "")
    _say(f"all {len(jobs)} task(s) ended{failed}; "
         f"{sum(n.vectors for n in summary.nodes.values())} vectors run")
    if failures and len(failures) == len(jobs) and len(reasons) == 1 and not summary.ran \
            and next(iter(failures.values())).deliberate:
        raise OpatlasError(f"every task failed: {reasons.pop()} (nothing ran; running the "
                           f"same command again fails the same way)")


@dataclass(frozen=True)
class Failure:
    """Why a task failed: its own error's last line, the log that holds the rest, and
    whether opatlas raised it on purpose (it fails again the same way)."""

    reason: str
    log: str
    deliberate: bool


EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::\s*(.*))?$")


def task_failure(exc: BaseException, job: Any) -> Failure:
    """The task's own error (the last exception line of the trace submitit carries, else of
    its stderr log), or submitit's own message's last line."""
    paths = getattr(job, "paths", None)
    log = getattr(paths, "stderr", None)
    texts = [str(exc)]
    if log is not None and Path(log).is_file():
        texts.append(Path(log).read_text(errors="replace"))
    for text in texts:
        for line in reversed(text.splitlines()):
            if m := EXCEPTION_LINE.match(line.strip()):
                name = m.group(1)
                short = name.rsplit(".", 1)[-1]
                return Failure(f"{short}: {m.group(2)}" if m.group(2) else short,
                               str(log or ""), name.startswith("opatlas."))
    lines = str(exc).strip().splitlines()
    return Failure(f"{type(exc).__name__}: {lines[-1].strip() if lines else ''}",
                   str(log or ""), False)


def _finish(store: Store, job: Any, part: int, folder: Path, summary: RunSummary,
            failures: dict[int, Failure] | None = None) -> None:
    """Merge task ``part``'s results; a failure is said with its reason, once per reason
    where ``failures`` (by part) gathers them."""
    try:
        report: PartReport = job.result()
    except Exception as exc:  # submitit re-raises the task's failure, or its scheduler's
        failure = task_failure(exc, job)
        seen = failures is not None and any(f.reason == failure.reason
                                            for f in failures.values())
        if failures is not None:
            failures[part] = failure
        if not seen:
            log = f" (log: {failure.log})" if failure.log else ""
            _say(f"task {part} failed: {failure.reason}{log}")
        _recover(store, part, folder, summary, quiet=seen, again=not failure.deliberate)
        return
    summary.duplicate_rows += _merge(store, *shard_paths(folder, part)).duplicates
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


def _recover(store: Store, part: int, folder: Path, summary: RunSummary, *,
             quiet: bool = False, again: bool = True) -> None:
    """A failed task's rows, merged and counted as run (its node: ``part-K (failed)``);
    ``quiet``: said only where it recorded some, ``again``: a re-run may get further."""
    merged = _merge(store, *shard_paths(folder, part))
    summary.duplicate_rows += merged.duplicates
    summary.failed_tasks.append(f"task {part}")
    ran = merged.statuses.total()
    summary.ran += ran
    summary.statuses.update(merged.statuses)
    node = summary.nodes.setdefault(f"part-{part} (failed)", NodeStats())
    node.vectors += ran
    node.failures += sum(v for k, v in merged.statuses.items() if k not in RESUMABLE)
    node.devices |= merged.devices
    if quiet and not ran and merged.complete:
        return
    _say(f"task {part}: {counted(ran, 'vector')} recovered"
         + ("" if merged.complete else " (its store cannot be read now: it stays for the "
                                       "next run)")
         + ("; run the same command again to run the rest" if again else ""))


@dataclass
class Merged:
    """What merging one task's shard brought: rows the store held already, its vectors'
    outcomes (a vector's status: its first failed pass's, else its first pass's) and
    devices; ``complete`` False where the task's store could not be read."""

    duplicates: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    devices: set[str] = field(default_factory=set)
    complete: bool = True


def _merge(store: Store, db: Path, shard: Path) -> Merged:
    """Import a task's shard (or, when it died before writing one, its own store) into the
    driver's store, then remove both."""
    if not shard.exists():
        if not db.exists():
            return Merged()
        try:
            with Store(db) as part_store:  # read-write: a killed task's WAL is replayed
                _export(part_store, shard)
        except Exception as exc:  # still open in a live task, or cut short mid-write
            _say(f"{db}: cannot read it now ({type(exc).__name__}); it stays for the next run")
            return Merged(complete=False)
    merged = _shard_outcomes(shard)
    added = store.import_results(shard)
    merged.duplicates = _parquet_rows(shard) - added
    shard.unlink()
    db.unlink(missing_ok=True)
    db.with_name(db.name + ".wal").unlink(missing_ok=True)
    return merged


def _shard_outcomes(shard: Path) -> Merged:
    import pyarrow.parquet as pq

    df = pq.read_table(shard, columns=["vector_id", "status", "device"]).to_pandas()
    failed = ~df["status"].isin(RESUMABLE)
    firsts = df.iloc[np.argsort(~failed.to_numpy(), kind="stable")].drop_duplicates("vector_id")
    return Merged(statuses=Counter(firsts["status"].tolist()), devices=set(df["device"]))


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def merge_leftovers(store: Store, folder: Path) -> int:
    """Shards a previous driver did not merge (it was killed, or a task outlived it)."""
    parts = sorted({int(p.stem.split("-")[1]) for p in folder.glob("part-*.*")
                    if p.stem.split("-")[1].isdigit()})
    if parts:
        _say(f"merging {len(parts)} shard(s) left in {folder} by an earlier run")
    return sum(_merge(store, *shard_paths(folder, k)).duplicates for k in parts)


def leftovers(folder: Path) -> tuple[int, int]:
    """(result rows the task shards and stores in ``folder`` hold, files that cannot be read
    now: a task still writing): what the next run merges first."""
    rows = unreadable = 0
    for path in folder.glob("part-*.*"):
        try:
            if path.suffix == ".parquet":
                rows += _parquet_rows(path)
            elif path.suffix == ".duckdb" and not path.with_suffix(".parquet").exists():
                with Store(path, read_only=True) as st:
                    rows += st.count()
        except Exception:  # open in a live task, or cut short by a kill
            unreadable += 1
    return rows, unreadable


def _say(text: str) -> None:
    print(f"opatlas: submitit: {text}", file=sys.stderr, flush=True)
