"""Every single-Einsum figure of the artifact's notebook in one call, plus the data behind."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pandas as pd

from opatlas.bounds.frontier import Frontier, frontier
from opatlas.bounds.gpu_data import measured_points, seed_points
from opatlas.bounds.plots import plot_accel_sweep, plot_bar_ratios, plot_frontiers
from opatlas.bounds.problems import (
    FIG12_LEGENDS,
    FIG14_NOTEBOOK_OPS,
    FIGURES,
    with_ops,
)


def write_artifact_csv(f: Frontier, path: Path, option: str = "--artifact-csv") -> Path:
    """The artifact's ``orojenesis.csv``: no header, its column order, ascending buffer
    (gzip-compressed for a .csv.gz name; ``-`` is standard output)."""
    import gzip

    from opatlas.atomic import write_output

    def write(tmp: Path) -> None:
        opener = gzip.open if str(path).lower().endswith(".gz") else open
        with opener(tmp, "wt", newline="") as fh:
            csv.writer(fh).writerows(f.artifact_rows())

    return write_output(path, write, option)


def fig10_legends() -> list[str]:
    return [e.name for e in FIGURES["fig10"]()]


def fig14_as_notebook(frontiers: list[Frontier]) -> list[Frontier]:
    """Fig. 14's curves with the OI the notebook draws, over 2·H·M·K·N for every group count
    (the data keep each problem's own OI, as ``bound gbmm --artifact-template`` prints)."""
    return [replace(f, einsum=with_ops(f.einsum, FIG14_NOTEBOOK_OPS)) for f in frontiers]


def first_of_each(figures: dict[str, list[Frontier]]) -> list[Frontier]:
    """Each problem once, as it first comes: a problem in two figures (Fig. 13's H=32 one is
    Fig. 14's G=1) has one set of data; Fig. 14 only changes the OI its plot draws."""
    first: dict[str, Frontier] = {}
    for group in figures.values():
        for f in group:
            first.setdefault(f.einsum.name, f)
    return list(first.values())


# Fig. 13 and 14 bound the artifact's GBMM template (every head against every group's
# weights), not GQA's grouped BMM (``bound gbmm`` without --artifact-template): say so on them
TITLES = {"fig13": "the artifact's GBMM template", "fig14": "the artifact's GBMM template"}
OI_TITLES = {"fig14": "the artifact's GBMM template; OI over 2·H·M·K·N"}


def make_figures(outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    fr = {name: [frontier(e) for e in make()] for name, make in FIGURES.items()}
    out: list[Path] = []
    first = first_of_each(fr)
    for f in first:
        write_artifact_csv(f, outdir / "data" / f.einsum.name / "orojenesis.csv")
    tidy = pd.concat([f.to_frame() for f in first])
    tidy.to_csv(outdir / "frontiers.csv", index=False)
    out.append(outdir / "frontiers.csv")
    out.append(plot_frontiers(fr["fig1"], outdir / "fig1.png", legends=["16384_1024_1024"],
                              xlim=(0.5, 1e8), ylim=(None, 1e10), y_end=1e8, plot_min=True,
                              all_points=True))
    legends = fig10_legends()
    out.append(plot_frontiers(fr["fig10"], outdir / "fig10_accesses.png", legends=legends,
                              xlim=(1e4, 1e8), ylim=(None, 1e10), y_end=2e8))
    out.append(plot_frontiers(fr["fig10"], outdir / "fig10_oi.png", legends=legends,
                              metric="oi", logx=False, logy=False, xlim=(1e4, 2e8),
                              ylim=(0, 6000), y_end=2e8))
    out.append(plot_bar_ratios(fr["fig11"], outdir / "fig11.png",
                               [f.einsum.name for f in fr["fig11"]]))
    drawn = {**fr, "fig14": fig14_as_notebook(fr["fig14"])}
    for name, legends_, ylim_acc, ylim_oi, xlim in (
            ("fig12", list(FIG12_LEGENDS), (0, 4e7), (0, 400), (None, 1e5)),
            ("fig13", [f"H={2**i}, K={4096 // 2**i}" for i in range(8)], (0, 4e9), (0, 3000),
             (1e3, 2e8)),
            ("fig14", [f"{2**i} group{'s' if i else ''}" for i in range(6)], (0, 1.5e12),
             (1, 140), (None, 2e8))):
        y_end, title = xlim[1], TITLES.get(name)
        out.append(plot_frontiers(drawn[name], outdir / f"{name}_accesses.png",
                                  legends=legends_, logy=False, xlim=xlim, ylim=ylim_acc,
                                  y_end=y_end, title=title))
        out.append(plot_frontiers(drawn[name], outdir / f"{name}_oi.png", legends=legends_,
                                  metric="oi", logy=False, xlim=xlim, ylim=ylim_oi, y_end=y_end,
                                  title=OI_TITLES.get(name, title)))
    gpu = pd.concat([seed_points(), measured_points()], ignore_index=True)
    out.append(plot_frontiers(fr["fig24a"], outdir / "fig24a.png", legends=["4k_4k_4k (fp32)"],
                              logy=False, xlim=(1e6, 2e8), ylim=(0, 4e9), y_end=2e8,
                              gpu_data=gpu, coefficient=4))
    out += fig24b(outdir, fr["fig24a"][0])
    return out


def fig24b(outdir: Path, bound: Frontier | None = None, mappings: int = 2000,
           search_rounds: int = 40) -> list[Path]:
    """Simba-like mappings of the 4096³ GEMM, GlobalBuffer 0.125–512 KB, against the bound:
    every mapping (``fig24b_mappings.csv.gz``), the best per size, and the plot."""
    from opatlas.bounds.accel_report import sweep_buffer_sizes
    from opatlas.bounds.arch import load_arch

    (e,) = FIGURES["fig24a"]()
    sweep = sweep_buffer_sizes(e, load_arch("simba"), mappings=mappings, bound=bound,
                               search_rounds=search_rounds)
    paths = [outdir / "fig24b_mappings.csv.gz", outdir / "fig24b_best.csv"]
    sweep.points.to_csv(paths[0], index=False)
    sweep.best().to_csv(paths[1], index=False)
    paths.append(plot_accel_sweep(sweep.frontier, sweep.points, outdir / "fig24b.png",
                                  title=f"Simba-like, {e.name} GEMM, {mappings:,} mappings "
                                        "per GlobalBuffer size", searched=sweep.searched))
    return paths
