"""The demo: the pipeline end to end on this machine, small enough for a minute."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from opatlas.console import make_console
from opatlas.run import RunConfig, run_spec
from opatlas.spec import resolve_spec
from opatlas.store import Store

DEMO_SPECS = ("demo-linear", "demo-bmm", "demo-layernorm", "demo-softmax", "demo-gelu")
# one PyTorch thread: timings that stay put on a laptop or CI box busy with other work
DEMO_BACKEND = {"threads": "1"}


def run_demo(out: Path, *, repeats: int | None = None, console: Console | None = None) -> Path:
    console = console or make_console()
    out.mkdir(parents=True, exist_ok=True)
    store_path = out / "opatlas.duckdb"
    console.rule("[bold]1. measure: CPU sweep of the core ops (PyTorch, perf_counter_ns)")
    with Store(store_path) as store:
        for name in DEMO_SPECS:
            spec = resolve_spec(name)
            summary = run_spec(spec, store, RunConfig(repeats=repeats, log_every=1000,
                                                      backend_options=DEMO_BACKEND))
            console.print(f"  {name:<16} {summary.total:>4} vectors, ran {summary.ran:>4}, "
                          f"skipped {summary.skipped:>4} already stored ({summary.rate:.1f} vec/s)")
        df = store.results()
    console.print(summary_table(df))
    for extra in _extensions():
        extra(out, console)
    console.rule("[bold]done")
    console.print(f"store:  {store_path.resolve()}")
    from opatlas.analyze.demo import ESTIMATE_REPORT, STORE_REPORT

    if (out / STORE_REPORT).exists():
        console.print(f"report of what was measured here: {(out / STORE_REPORT).resolve()}")
    console.print(f"report: {(out / ESTIMATE_REPORT).resolve()}  (a training step's estimate: "
                  f"per op, predicted vs bound)")
    return store_path


def summary_table(df: pd.DataFrame) -> Table:
    """Per op and pass: vectors, median time, best achieved GFLOP/s and GB/s."""
    table = Table("op", "pass", "vectors ok", "failed", "median µs (all)", "best GFLOP/s",
                  "best GB/s", title="measured on this CPU")
    for (op, pass_), g in df.groupby(["op", "pass"], sort=True):
        ok = g[g["status"] == "ok"]
        gflops = (ok["flops"] / ok["median_ns"]).max() if len(ok) else float("nan")
        gbs = (ok["min_bytes"] / ok["median_ns"]).max() if len(ok) else float("nan")
        table.add_row(op, pass_, str(len(ok)), str(len(g) - len(ok)),
                      f"{ok['median_ns'].median() / 1e3:.1f}" if len(ok) else "-",
                      f"{gflops:.1f}", f"{gbs:.1f}")
    return table


def _extensions() -> list:
    """Later stages (bounds, fit, predict, estimate) add their part of the demo here."""
    from opatlas.analyze.demo import demo_analyze
    from opatlas.bounds.demo import demo_bound
    from opatlas.estimate.demo import demo_estimate
    from opatlas.fit.demo import demo_fit

    return [demo_bound, demo_fit, demo_estimate, demo_analyze]
