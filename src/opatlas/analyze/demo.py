"""The analyzer's part of ``opatlas demo``: HTML reports of the demo's estimate and store."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from opatlas.analyze import api

ESTIMATE_REPORT = "report.html"
STORE_REPORT = "report-store.html"


def demo_analyze(out: Path, console: Console) -> None:
    console.rule("[bold]5. analyze: measured vs predicted vs bound, per op (HTML reports)")
    est = api.analyze("llemma_7b_4_2_2_P")
    api.write_html(est, out / ESTIMATE_REPORT)
    slow = est.rows.sort_values("time_s", ascending=False).iloc[0]
    console.print(f"  estimate: {len(est.rows)} rows of the slowest stage; the largest is "
                  f"{_label(slow)} ({100 * slow['share']:.1f}% of the step)")
    store = out / "opatlas.duckdb"
    if store.exists():
        meas = api.analyze(store)
        api.write_html(meas, out / STORE_REPORT)
        console.print(f"  store: {len(meas.rows)} measurements with held-out predictions and "
                      f"bounds: {(out / STORE_REPORT).resolve()}")


def _label(row) -> str:
    """'linear3 bwd' for an op's pass; a collective or the bubble by its name alone."""
    return f"{row['op']} {row['pass']}" if row["pass"] in ("fwd", "bwd", "recompute") \
        else str(row["op"])
