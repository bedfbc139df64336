"""Every single-Einsum figure of the artifact's notebook in one call, plus the data behind."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pandas as pd

from opatlas.bounds.frontier import Frontier, frontier
from opatlas.bounds.gpu_data import measured_points, seed_points, short_gpu_name, versus_bound
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
    out += fig24a(outdir, fr["fig24a"][0])
    out += fig24b(outdir, fr["fig24a"][0])
    return out


WORD_NAMES = {4: "fp32", 2: "bf16/fp16"}
FIG24A_TITLE = ("4096³ GEMM DRAM bytes at the L2 size; bf16 against the bound\nfor 2-byte "
                "words; points that coincide drawn side by side")
# log-log, as the bound spans 1e8..3e9 bytes over 1 MB..200 MB; points that would cover
# each other (the seed's H100 simt and tensor and our simt are within 1%) stand e^0.1 apart
# around the dotted line at their L2 size
FIG24A_AXES = {"logx": True, "logy": True, "xlim": (1e6, 2e8), "ylim": (8e7, 4e9),
               "xlabel": "L2 size / buffer size (bytes)", "ylabel": "DRAM traffic (bytes)",
               "gpu_spread": 0.1, "legend_loc": "upper right"}


def fig24a_points() -> pd.DataFrame:
    """The seed's and our own GPU measurements, each with its legend label."""
    seed, ours = seed_points(), measured_points()
    seed["label"] = [f"A2–H100, Orojenesis seed (CUTLASS {k})" for k in seed["kernel"]]
    ours["label"] = [f"{short_gpu_name(g)}, measured here (cuBLAS {k}"
                     + (f", {w}-B words)" if w != 4 else ")")
                     for g, k, w in zip(ours["gpu"], ours["kernel"], ours["word_bytes"],
                                        strict=True)]
    points = pd.concat([seed, ours], ignore_index=True)
    points["gpu_short"] = [short_gpu_name(str(g)) for g in points["gpu"]]
    return points


def fig24a_comparison(bound: Frontier | None = None,
                      points: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every Fig. 24a point beside the 4096³ bound at its L2 size (:func:`versus_bound`)."""
    if bound is None:
        bound = frontier(FIGURES["fig24a"]()[0])
    return versus_bound(fig24a_points() if points is None else points, bound)


def fig24a_lines(table: pd.DataFrame) -> list[str]:
    """The comparison as text, one line per point."""
    lines = ["Fig. 24a, 4096³ GEMM: DRAM bytes measured vs the bound at the GPU's L2 size "
             "(in the kernel's own words)"]
    for r in table.to_dict("records"):
        lines.append(f"  {r['source']:<8} {short_gpu_name(str(r['gpu'])):<5} {r['kernel']:<6} "
                     f"{r['dtype']:<4} L2 {r['l2_bytes'] / 2**20:>4.0f} MiB: "
                     f"{r['dram_bytes']:>13,.0f} B measured, bound {r['bound_bytes']:>13,} B, "
                     f"ratio {r['ratio']:.3f}")
    return lines


def fig24a(outdir: Path, bound: Frontier) -> list[Path]:
    """Fig. 24a: the bound in bytes for fp32 words, and for 2-byte words where a measured
    kernel moves them (a bf16 point is never set against the fp32 curve), with the seed's
    and our measured points; plus the numbers (``fig24a_vs_bound.csv``)."""
    points = fig24a_points()
    table = fig24a_comparison(bound, points)
    csv_path = outdir / "fig24a_vs_bound.csv"
    table.to_csv(csv_path, index=False)
    sizes = [4, *sorted({int(w) for w in points["word_bytes"]} - {4}, reverse=True)]
    legends = [f"bound, {WORD_NAMES.get(w, f'{w}-B')} words ({w} B)" for w in sizes]
    png = plot_frontiers([bound] * len(sizes), outdir / "fig24a.png", legends=legends,
                         y_end=2e8, gpu_data=points, coefficient=4, coefficients=sizes,
                         figsize=(5.2, 4.2), title=FIG24A_TITLE, steps=True, **FIG24A_AXES)
    return [png, csv_path]


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
