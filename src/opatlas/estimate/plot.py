"""Stacked bars of the step-time breakdown, and the layout labels the tables share.

matplotlib is imported by :func:`plot_breakdown` alone: the search's table takes its labels
from here, and importing pyplot cost it 0.3 s of a 1.1 s command."""

from __future__ import annotations

from pathlib import Path

from opatlas.estimate.config import TrainConfig
from opatlas.estimate.engine import Estimate
from opatlas.figures import save_figure

PARTS = ("compute", "tp_comm", "ep_comm", "pp_bubble", "p2p", "dp_comm", "optimizer")


def label(e: Estimate) -> str:
    return layout_label(e.config)


def layout_label(c: TrainConfig) -> str:
    """Every searched key a layout sets, so that a row can be reproduced with --set: ``v2`` the
    interleaved schedule's chunks, ``sp`` sequence parallelism."""
    p = c.parallel
    return (f"dp{p.dp} tp{p.tp} pp{p.pp}" + (f"v{p.virtual_stages}" if p.virtual_stages > 1 else "")
            + (f" ep{p.ep}" if p.ep > 1 else "") + (" sp" if p.sequence_parallel else "")
            + f"\nmb{c.training.micro_batch} z{p.zero} {p.recompute}")


def plot_breakdown(estimates: list[Estimate], path: Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(estimates) + 2), 4), dpi=150)
    x = range(len(estimates))
    bottom = [0.0] * len(estimates)
    for part in PARTS:
        vals = [e.breakdown[part] for e in estimates]
        ax.bar(x, vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(list(x), [label(e) for e in estimates], fontsize=6)
    ax.set_ylabel("step time (s)")
    ax.set_title(title or estimates[0].config.model.name, fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return save_figure(fig, path)
