"""``opatlas run``."""

from __future__ import annotations

from pathlib import Path

import typer

from opatlas.cli.common import OpsModuleOpt, PartOpt, PartsOpt, StoreOpt, WhereOpt, load
from opatlas.errors import OpatlasError


def run(
    spec: str = typer.Argument(..., help="Spec file or built-in spec name."),
    backend: str = typer.Option("cpu", "--backend", help="Where to run: cpu or cuda."),
    backend_opt: list[str] | None = typer.Option(
        None, "--backend-opt", help="Backend option key=value (cuda: timing=events|profiler, "
                                    "graphs=1, flush_l2=1), repeatable."),
    store: Path = StoreOpt,
    repeats: int | None = typer.Option(None, "--repeats", min=1,
                                       help="Timed repeats per pass (default: the spec's)."),
    warmup: int | None = typer.Option(None, "--warmup", min=0, help="Untimed warm-up runs."),
    timeout: float = typer.Option(120.0, "--timeout", min=0.01,
                                  help="Seconds one vector may take before it is killed."),
    parts: int = PartsOpt,
    part: int = PartOpt,
    where: str | None = WhereOpt,
    retry_failed: bool = typer.Option(False, "--retry-failed",
                                      help="Run again vectors recorded as error/oom/timeout/crash."),
    log_every: int = typer.Option(100, "--log-every", min=1,
                                  help="Log line every N vectors when not on a terminal."),
    ops_module: list[str] | None = OpsModuleOpt,
) -> None:
    """Run every valid vector of SPEC on a backend and record the timings in the store.

    Re-running the same command resumes: vectors already in the store are skipped.

    Examples:

        opatlas run examples/specs/linear.yml --backend cpu --repeats 5

        opatlas run flash_atten.yml --parts 4 --part 2 --store part2.duckdb

        opatlas run linear.yml --where "dim >= 4096 and mp == 2" --timeout 30

        opatlas run linear.yml --backend cuda --backend-opt timing=profiler
    """
    from opatlas.run import RunConfig, run_spec
    from opatlas.store import Store
    s = load(spec, ops_module)
    options = {}
    for item in backend_opt or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise OpatlasError(f"--backend-opt {item!r}: expected key=value")
        options[key.strip()] = value.strip()
    cfg = RunConfig(backend=backend, backend_options=options, repeats=repeats, warmup=warmup,
                    timeout_s=timeout,
                    retry_failed=retry_failed, log_every=log_every,
                    ops_modules=list(ops_module or []))
    with Store(store) as st:
        summary = run_spec(s, st, cfg, parts=parts, part=part, where=where)
    stats = ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items())) or "nothing to run"
    typer.echo(f"{s.name}: {summary.total} vectors; {summary.skipped} already in the store; "
               f"ran {summary.ran} ({stats}) in {summary.elapsed_s:.1f} s "
               f"({summary.rate:.1f} vec/s)")
    typer.echo(f"store: {store.resolve()}")
