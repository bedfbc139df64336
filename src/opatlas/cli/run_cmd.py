"""``opatlas run``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from opatlas.cli.common import (
    OpsModuleOpt,
    PartOpt,
    PartsOpt,
    StoreOpt,
    WhereOpt,
    load,
    options_given,
)
from opatlas.console import counted
from opatlas.errors import OpatlasError

if TYPE_CHECKING:
    from opatlas.run import RunSummary
    from opatlas.spec import SweepSpec
    from opatlas.store import Store


# a spec's cap on repeats and warmup (SweepSpec's fields, opatlas.spec.model), which the
# options overriding them keep: not imported, as pydantic would slow every command's start
MAX_REPEATS = 100_000
EXECUTOR_OPTIONS = {"ray": ("address", "devices_per_task", "chunk", "ray_resource"),
                    "submitit": ("jobs", "submitit_folder", "submitit_cluster", "submitit_opt")}


def run(
    ctx: typer.Context,
    spec: str = typer.Argument(..., help="Spec file or built-in spec name."),
    backend: str = typer.Option("cpu", "--backend", help="Where to run: cpu, cuda, wormhole-sim (a "
                                                             "simulated Tenstorrent Wormhole) or "
                                                             "ttnn (a Tenstorrent card)."),
    backend_opt: list[str] | None = typer.Option(
        None, "--backend-opt", help="Backend option key=value, repeatable. cpu: threads=N "
                                    "(PyTorch's intra-op threads); cuda: "
                                    "timing=events|profiler, graphs=1, flush_l2=1; both: "
                                    "min_time_ms=T (time each pass for at least T ms); "
                                    "wormhole-sim: params=FILE (from opatlas calibrate)."),
    store: Path = StoreOpt,
    repeats: int | None = typer.Option(None, "--repeats", min=1, max=MAX_REPEATS,
                                       help="Timed repeats per pass (default: the spec's)."),
    warmup: int | None = typer.Option(None, "--warmup", min=0, max=MAX_REPEATS,
                                      help="Untimed warm-up runs."),
    timeout: float = typer.Option(120.0, "--timeout", min=0.01,
                                  help="Seconds one vector may take before it is killed "
                                       "(a worker's start-up, e.g. importing PyTorch, is not "
                                       "counted)."),
    parts: int = PartsOpt,
    part: int = PartOpt,
    where: str | None = WhereOpt,
    retry_failed: bool = typer.Option(False, "--retry-failed",
                                      help="Run again vectors recorded as error/oom/timeout/crash."),
    log_every: int = typer.Option(100, "--log-every", min=1,
                                  help="Log line every N vectors (and at least every 30 s) when not on a "
                                       "terminal."),
    ops_module: list[str] | None = OpsModuleOpt,
    executor: str = typer.Option("local", "--executor",
                                 help="local (this machine), ray (a Ray cluster; pip install "
                                      "'opatlas\\[ray]') or submitit (a SLURM job array; pip "
                                      "install 'opatlas\\[slurm]')."),
    address: str | None = typer.Option(
        None, "--address", help="Ray cluster: auto (the running one) or HOST:PORT of its "
                                "head (6379 unless `ray start --port` said otherwise), checked "
                                "within seconds; default: start Ray on this machine."),
    devices_per_task: int = typer.Option(1, "--devices-per-task", min=1,
                                         help="Ray: devices each worker holds."),
    chunk: int = typer.Option(16, "--chunk", min=1, help=(
        "Ray: vectors retried and recorded together (a call carries the chunks that run "
        "~50 ms).")),
    ray_resource: str | None = typer.Option(
        None, "--ray-resource", help="Ray: the resource a worker holds (default: GPU for cuda, "
                                     "TTNPU for ttnn, CPU otherwise)."),
    jobs: int = typer.Option(4, "--jobs", min=1, help="submitit: tasks in the job array."),
    submitit_folder: Path | None = typer.Option(
        None, "--submitit-folder", help="submitit: shards and logs (default: STORE.submitit/, "
                                        "on a file system every node sees)."),
    submitit_cluster: str | None = typer.Option(
        None, "--submitit-cluster", help="submitit: slurm, local (processes here) or debug "
                                         "(in this process); default: slurm where it exists "
                                         "(srun on PATH), else local, said on stderr."),
    submitit_opt: list[str] | None = typer.Option(
        None, "--submitit-opt", help="submitit parameter key=value, repeatable (e.g. "
                                     "slurm_partition=gpu, timeout_min=240, gpus_per_node=1)."),
) -> None:
    """Run every valid vector of SPEC on a backend and record the timings in the store.

    Re-running the same command resumes: vectors already in the store are skipped.

    Examples:

        opatlas run examples/specs/linear.yml --backend cpu --repeats 5

        opatlas run examples/specs/ett_flash_atten.yml --parts 4 --part 2 --store part2.duckdb

        opatlas run examples/specs/linear.yml --where "dim >= 1024 and mp == 2" --timeout 30

        opatlas run examples/specs/linear.yml --backend cuda --backend-opt timing=profiler

        opatlas run llm-linear --backend cuda --executor ray --address auto --chunk 16

        opatlas run llm-linear --backend cuda --executor submitit --jobs 16 \\
            --submitit-opt slurm_partition=gpu --submitit-opt gpus_per_node=1
    """
    from opatlas.backends.base import check_backend_op
    from opatlas.run import RunConfig, run_spec
    from opatlas.run.runner import check_backend_dtypes
    s = load(spec, ops_module)
    options = key_values(backend_opt, "--backend-opt")
    cfg = RunConfig(backend=backend, backend_options=options, repeats=repeats, warmup=warmup,
                    timeout_s=timeout,
                    retry_failed=retry_failed, log_every=log_every,
                    ops_modules=list(ops_module or []))
    if executor not in ("local", "ray", "submitit"):
        raise OpatlasError(f"--executor {executor!r}: expected local, ray or submitit")
    for other, names in EXECUTOR_OPTIONS.items():
        if other != executor and (given := options_given(ctx, names)):
            raise OpatlasError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for "
                               f"--executor {other}, and this run's executor is {executor}")
    if executor == "submitit" and (parts, part) != (1, 1):
        raise OpatlasError("--executor submitit splits the sweep itself into --jobs parts; "
                           "drop --parts/--part")
    check_backend_op(backend, s.op)
    _check_before_store(s, where, executor, backend, options)
    check_backend_dtypes(s, backend, parts=1 if executor == "submitit" else parts,
                         part=1 if executor == "submitit" else part, where=where,
                         file=spec if Path(spec).exists() else None)

    folder = (submitit_folder or store.with_name(store.name + ".submitit")) \
        if executor == "submitit" else None

    def execute(st: Store) -> RunSummary:
        if folder is not None:
            from opatlas.run.submitit_executor import SubmititConfig, run_spec_submitit

            scfg = SubmititConfig(jobs=jobs, cluster=submitit_cluster, folder=folder,
                                  parameters=_typed(key_values(submitit_opt, "--submitit-opt")))
            return run_spec_submitit(s, st, cfg, scfg, where=where)
        if executor == "ray":
            from opatlas.run.ray_executor import RayConfig, run_spec_ray

            rcfg = RayConfig(address=address, devices_per_task=devices_per_task, chunk=chunk,
                             resource=ray_resource)
            return run_spec_ray(s, st, cfg, rcfg, parts=parts, part=part, where=where)
        return run_spec(s, st, cfg, parts=parts, part=part, where=where)

    try:
        from opatlas.store.writing import store_for_writing

        with store_for_writing(store, keep_recorded_sweep=True) as st:
            summary = execute(st)
    except KeyboardInterrupt:
        typer.echo(f"opatlas: interrupted; {interrupted_kept(store, folder)}", err=True)
        raise typer.Exit(130) from None
    stats = ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items())) or "nothing to run"
    typer.echo(f"{s.name}: {counted(summary.total, 'vector')}; {summary.skipped} already in "
               f"the store{failed_earlier(summary)}; "
               f"ran {summary.ran} ({stats}) in {summary.elapsed_s:.1f} s "
               f"({summary.rate:.1f} vec/s)"
               + (f"; {summary.not_run} not run" if summary.failed_tasks else ""))
    for line in node_lines(summary):
        typer.echo(line)
    typer.echo(f"store: {store.resolve()}")
    for note in summary.notes:
        typer.echo(f"opatlas: {note}", err=True)
    if summary.total == 0 and parts > 1:
        why = "a --where that selects none of them, " if where else ""
        typer.echo(f"opatlas: note: part {part} of {parts} holds no valid vector of {s.name}: "
                   f"part k of n takes the grid points k, k+n, k+2n, ..., so fewer points than "
                   f"parts, {why}or points the op's rules refuse leave a part empty; nothing "
                   f"was run", err=True)
    if summary.failed_tasks:
        typer.echo(f"opatlas: {', '.join(summary.failed_tasks)} failed; "
                   f"{counted(summary.not_run, 'vector')} not run: run the same command again "
                   f"to run them", err=True)
        raise typer.Exit(1)


def _counts(path: Path) -> tuple[int, int] | None:
    """(result rows, recorded vectors) of the store at ``path``; (0, 0) where it is missing
    or blank; None where it cannot be read (not ours to judge: kept)."""
    if not path.exists() or path.stat().st_size == 0:
        return 0, 0
    from opatlas.store import Store

    try:
        with Store(path, read_only=True) as st:
            return st.count(), st.count("vectors")
    except Exception:
        return None


def interrupted_kept(store: Path, folder: Path | None) -> str:
    """What an interrupted run leaves, where, and how to go on."""
    resume = "run the same command again to resume"
    counts = _counts(store)
    if counts is None:
        kept = f"{store} is kept (it cannot be read now)"
    elif not store.exists():
        kept = f"nothing was recorded and no store is left at {store}"
    elif counts[0]:
        kept = f"{counts[0]:,} result row(s) kept in {store}"
    elif counts[1]:
        kept = (f"{store} keeps the sweep recorded so far ({counted(counts[1], 'vector')}), "
                f"no result yet")
    else:
        kept = f"{store} holds no result"
    tasks = _tasks_kept(folder) if folder is not None else ""
    if tasks or (counts is None or counts != (0, 0)):
        return f"{kept}{tasks}; {resume}"
    return kept


def _tasks_kept(folder: Path) -> str:
    """What the submitit tasks hold in ``folder`` (merged by the next run), as a clause."""
    from opatlas.run.submitit_executor import leftovers

    if not folder.is_dir():
        return ""
    rows, unreadable = leftovers(folder)
    if not rows and not unreadable:
        return ""
    busy = f" (and {unreadable} task file(s) still in use)" if unreadable else ""
    return (f"; the tasks' {rows:,} result row(s) in {folder}{busy} are merged into the "
            f"store by the next run (tasks still running on SLURM go on)")


def failed_earlier(summary: RunSummary) -> str:
    """Of the vectors skipped, those the store holds as failed, by status: a resumed run
    does not run them again unless told to."""
    n = sum(summary.failed_earlier.values())
    if not n:
        return ""
    by = ", ".join(f"{k} {v}" for k, v in sorted(summary.failed_earlier.items()))
    return f" ({n} failed earlier: {by}; --retry-failed runs them again)"


def key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    """``KEY=VALUE`` options as a mapping; a missing ``=``, key or value is refused."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OpatlasError(f"{flag} {item!r}: expected key=value")
        if not value.strip():  # not "use the default": a value lost from a script's variable
            raise OpatlasError(f"{flag} {item!r}: {key.strip()} has an empty value; give "
                               f"{key.strip()}=VALUE, or leave the option out for its default")
        out[key.strip()] = value.strip()
    return out


def _typed(options: dict[str, str]) -> dict[str, object]:
    """Numbers as numbers (submitit checks the types of timeout_min, gpus_per_node, ...)."""
    out: dict[str, object] = {}
    for key, value in options.items():
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def node_lines(summary: RunSummary) -> list[str]:
    """Per node of a distributed run: vectors, failures, busy time, the devices it used."""
    if not summary.nodes:
        return []
    lines = [f"{'node':<28} {'vectors':>8} {'failures':>8} {'busy s':>9}  devices"]
    for name, node in sorted(summary.nodes.items()):
        lines.append(f"{name:<28} {node.vectors:>8} {node.failures:>8} {node.busy_s:>9.1f}  "
                     f"{' '.join(sorted(node.devices)) or '-'}")
    if summary.retried_chunks:
        lines.append(f"{summary.retried_chunks} chunk(s) ran again after their worker died; "
                     f"{summary.duplicate_rows} row(s) were already recorded and kept once")
    return lines


def _check_before_store(spec: SweepSpec, where: str | None, executor: str, backend: str,
                        options: dict[str, str]) -> None:
    """Refuse a bad ``--where`` or backend option before the store is created or written:
    a command that fails leaves nothing behind. The backend is only built here for the
    local executor (remote workers may have devices this machine lacks); for the others, the
    option names are checked against the backend's class."""
    from opatlas.sweep import VectorStream

    stream = VectorStream(spec, where=where)
    if next(iter(stream), None) is None:  # read to the end only when none is valid
        from opatlas.cli.common import no_valid_vector

        raise no_valid_vector(spec, where, stream.invalid, "nothing to run, no store written")
    if executor == "local":
        from opatlas.backends import get_backend

        get_backend(backend, **options)
    else:
        from opatlas.backends.base import check_backend_options

        check_backend_options(backend, options)
