"""The estimator's part of ``opatlas demo``: upstream's example on the bundled A100 data."""

from __future__ import annotations

import warnings
from pathlib import Path

from rich.console import Console

from opatlas.estimate import estimate_step, load_config
from opatlas.estimate.plot import plot_breakdown


def demo_estimate(out: Path, console: Console) -> None:
    console.rule("[bold]4. estimate: one training step of upstream's llemma-7B example (A100)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = estimate_step(load_config("llemma_7b_4_2_2_P"))
    parts = ", ".join(f"{k} {v:.2f}" for k, v in e.breakdown.items())
    console.print(f"  step {e.step_time_s:.2f} s (estimate-train-time printed 9.48 s): {parts}")
    console.print(f"  {e.tokens_per_s:,.0f} tokens/s, MFU {100 * e.mfu:.1f}%, "
                  f"{e.memory_gib:.1f} GiB per GPU")
    console.print(f"  plot: {plot_breakdown([e], out / 'llemma_step.png')}")
