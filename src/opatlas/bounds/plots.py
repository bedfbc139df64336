"""Matplotlib figures in the artifact's styles (plots.py of the Orojenesis artifact)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from opatlas.bounds.frontier import Curve, Frontier
from opatlas.figures import save_figure


def _series(f: Frontier, metric: str, y_end: float | None, coefficient: float
            ) -> tuple[np.ndarray, np.ndarray]:
    x = f.buffer.astype(float) * coefficient
    y = (f.accesses.astype(float) * coefficient if metric == "accesses" else f.oi())
    if y_end is not None and x[-1] < y_end:  # run the curve flat to the right edge
        x, y = np.append(x, y_end), np.append(y, y[-1])
    return x, y


def plot_frontiers(frontiers: Sequence[Frontier], path: Path, *, legends: Sequence[str] = (),
                   metric: str = "accesses", logx: bool = True, logy: bool = True,
                   xlim: tuple | None = None, ylim: tuple | None = None,
                   y_end: float | None = None, plot_min: bool = False, all_points: bool = False,
                   gpu_data: pd.DataFrame | None = None, coefficient: float = 1.0,
                   figsize: tuple[float, float] = (3.2, 3.2), title: str | None = None,
                   coefficients: Sequence[float] = (), steps: bool = False,
                   xlabel: str | None = None, ylabel: str | None = None,
                   gpu_spread: float = 0.0, legend_loc: str = "best") -> Path:
    """Accesses (or OI) vs buffer size, one line per problem; optional algo min/max lines,
    the scatter of every tiling's best accesses, and measured GPU traffic. With ``plot_min``,
    dotted vertical lines mark one word (``coefficient`` on the x axis) and every operand on
    chip.

    ``coefficients`` (bytes per word) overrides ``coefficient`` curve by curve: the same
    frontier drawn for 4-byte and for 2-byte words is two curves. ``steps`` draws each curve
    as the step function it is (the bound at B is the last point at or below B) instead of
    joining its points. ``xlabel``/``ylabel`` replace the default axis names;
    ``gpu_spread`` > 0 spreads GPU points that share an L2 size sideways (see
    :func:`_scatter_gpu`); ``legend_loc`` is matplotlib's legend ``loc``."""
    fig, ax = plt.subplots(figsize=figsize, dpi=150)
    for i, f in enumerate(frontiers):
        label = legends[i] if i < len(legends) else f.einsum.name
        x, y = _series(f, metric, y_end, coefficients[i] if i < len(coefficients)
                       else coefficient)
        if all_points:
            ax.scatter(x[: len(f.buffer)], y[: len(f.buffer)], s=6, color="tab:green", zorder=3)
        ax.plot(x, y, label=label, lw=1.4, drawstyle="steps-post" if steps else "default")
    if plot_min and frontiers:
        f = frontiers[0]
        ax.axhline(f.algo_min * coefficient, ls="--", color="red", lw=1, label="Algo min")
        ax.axhline(f.algo_max * coefficient, ls="--", color="darkred", lw=1, label="Algo max")
        # dotted: one word (the smallest buffer) and every operand on chip, both in x's units
        ax.axvline(coefficient, ls=":", color="grey", lw=1)
        ax.axvline(f.einsum.total_operand_size * coefficient, ls=":", color="grey", lw=1)
    if gpu_data is not None and len(gpu_data):
        _scatter_gpu(ax, gpu_data, gpu_spread)
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    ax.set_xlabel(xlabel or f"Buffer Size ({'B' if coefficient == 1 else 'bytes'})")
    ax.set_ylabel(ylabel or ("Backing Store Accesses (B)" if metric == "accesses"
                             else "Op Intensity (Op/B)"))
    if xlim:
        ax.set_xlim(*xlim)
    if ylim:
        ax.set_ylim(*ylim)
    return _finish(fig, ax, path, title, legend_loc)


# (source, kernel): marker, colour, size, filled. Shapes and sizes differ so that points at
# one L2 size (the seed's H100 simt and tensor, our simt: 373-376 MiB) stay apart: the
# seed's are hollow and larger, ours filled and smaller, drawn over them.
GPU_STYLES = {("seed", "simt"): ("o", "tab:blue", 36, False),
              ("seed", "tensor"): ("s", "tab:green", 30, False),
              ("measured", "simt"): ("P", "tab:red", 28, True),
              ("measured", "tf32"): ("^", "tab:purple", 24, True),
              ("measured", "bf16"): ("D", "tab:orange", 22, True)}
OTHER_GPU_STYLE = ("v", "tab:brown", 30, True)


def _scatter_gpu(ax, gpu_data: pd.DataFrame, spread: float = 0.0) -> None:
    """GPU DRAM bytes at each GPU's L2 size: one legend entry per ``label`` (when the frame
    has one), else per kernel and seed-or-measured.

    With ``spread`` > 0 the points that would cover each other (one L2 size, DRAM bytes
    within 8%) stand side by side, x scaled by exp(spread·k) for k = -(n-1)/2 .. (n-1)/2
    from the fewest bytes up (:func:`_side_by_side`), and a dotted line with the GPU's name
    marks the true L2 size they are read at."""
    data = gpu_data.copy()
    if "source" not in data:
        data["source"] = ["seed" if "artifact" in h else "measured" for h in data["how"]]
    if "label" not in data:
        data["label"] = [f"GPU {k} ({s})" for k, s in zip(data["kernel"], data["source"],
                                                           strict=True)]
    x = data["l2_bytes"].astype(float)
    if spread > 0:
        x = x * np.exp(spread * _side_by_side(data))
        _mark_l2_sizes(ax, data)
    for label, g in data.groupby("label", sort=False):
        marker, color, size, filled = GPU_STYLES.get(
            (g["source"].iloc[0], g["kernel"].iloc[0]), OTHER_GPU_STYLE)
        ax.scatter(x[g.index], g["dram_bytes"], marker=marker, s=size,
                   facecolors=color if filled else "none",
                   edgecolors=color, linewidths=1.0 if filled else 1.2,
                   zorder=5 if filled else 4, label=label)


def _side_by_side(data: pd.DataFrame, close: float = 1.08) -> np.ndarray:
    """For each row, its place in its cluster, centred on 0: a cluster is the labels at one
    L2 size whose DRAM bytes lie within a factor ``close`` of the next (points that would
    cover each other); a point alone keeps place 0, at its true L2 size."""
    place = np.zeros(len(data))
    for _, g in data.groupby("l2_bytes", sort=False):
        ys = g.groupby("label", sort=False)["dram_bytes"].mean().sort_values()
        clusters: list[list[str]] = []
        for label, y in ys.items():
            if clusters and y <= ys[clusters[-1][-1]] * close:
                clusters[-1].append(label)
            else:
                clusters.append([label])
        where = {lab: i - (len(c) - 1) / 2 for c in clusters for i, lab in enumerate(c)}
        place[data.index.get_indexer(g.index)] = [where[lab] for lab in g["label"]]
    return place


def _mark_l2_sizes(ax, data: pd.DataFrame) -> None:
    """A dotted line at each L2 size, named by the GPUs that have it."""
    names = "gpu_short" if "gpu_short" in data else "gpu"
    for l2, g in data.groupby("l2_bytes"):
        ax.axvline(float(l2), ls=":", lw=0.8, color="grey", zorder=1)
        ax.annotate("/".join(dict.fromkeys(g[names].astype(str))), (float(l2), 0.0),
                    xycoords=("data", "axes fraction"), xytext=(-1, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=6,
                    color="dimgrey", rotation=90)


def _finish(fig, ax, path: Path, title: str | None, legend_loc: str = "best") -> Path:
    if title:
        ax.set_title(title, fontsize=8)
    ax.legend(fontsize=6, loc=legend_loc)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_bar_ratios(frontiers: Sequence[Frontier], path: Path, legends: Sequence[str],
                    sort: bool = True) -> Path:
    """Fig. 11: maximal effectual buffer over total operand size, as horizontal bars."""
    ratios = [f.max_effectual_ratio for f in frontiers]
    pairs = sorted(zip(ratios, legends, strict=True)) if sort else list(zip(ratios, legends,
                                                                            strict=True))
    fig, ax = plt.subplots(figsize=(6, 6), dpi=150)
    ax.barh([p[1] for p in pairs], [p[0] for p in pairs], color="tab:blue")
    for i, (r, _) in enumerate(pairs):
        ax.text(r, i, f" {100 * r:.1f}%", va="center", fontsize=7)
    ax.set_xlabel("Maximal effectual buffer / total operand size")
    ax.set_xlim(0, max(ratios) * 1.2)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_curves(curves: Sequence[Curve], path: Path, *, mins: dict[str, float] | None = None,
                title: str | None = None, best: Curve | None = None) -> Path:
    """Multi-Einsum comparison: steps-post curves (cumulative minimum), algo-min lines, and
    ``best`` (the schemes' envelope) dotted over them, so that the curves it follows show."""
    fig, ax = plt.subplots(figsize=(4, 3.2), dpi=150)
    for c in curves:
        ax.plot(c.buffer, np.minimum.accumulate(c.accesses), drawstyle="steps-post",
                label=c.label)
    if best is not None:
        ax.plot(best.buffer, np.minimum.accumulate(best.accesses), drawstyle="steps-post",
                color="black", ls=":", lw=1.4, zorder=5, label=best.label)
    for (label, value), color in zip((mins or {}).items(), ("red", "blue"), strict=False):
        ax.axhline(value, ls="--", color=color, lw=1, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Buffer Size (B)")
    ax.set_ylabel("Backing Store Accesses (B)")
    return _finish(fig, ax, path, title)


def plot_accel_sweep(frontier: Frontier, points: pd.DataFrame, path: Path, *,
                     level: str = "GlobalBuffer", coefficient: float | None = None,
                     title: str | None = None, figsize: tuple[float, float] = (6.0, 3.4),
                     searched: pd.DataFrame | None = None, xlabel: str | None = None) -> Path:
    """Fig. 24b: every mapping's DRAM accesses scattered at its level's capacity (one colour
    per size), the best per size starred (and, with ``searched``, the best after local search
    as a diamond), over the Orojenesis bound.

    The axes are in bytes: the bound (in words) is scaled by ``coefficient``, the bytes per
    word, by default the points' own (``dram_bytes / dram_accesses``), so that a star sits
    above or below the line as the table's gap says. Each size's mappings stand at the
    capacity their bound is taken at (``bound_capacity_bytes``, the size plus the on-chip
    levels above the swept one, when the points have it)."""
    if coefficient is None:
        coefficient = _bytes_per_word(points)
    fig, ax = plt.subplots(figsize=figsize, dpi=150)
    sizes = sorted(points["capacity_bytes"].unique())
    at = _bound_capacities(points)
    tiles = points["tile_words"].max() * coefficient
    x_end = max(float(frontier.buffer[-1]) * coefficient, max(at.values()) * 4, tiles * 2)
    x, y = _series(frontier, "accesses", x_end, coefficient)
    ax.plot(x, y, color="black", lw=1.4, label="Orojenesis bound", zorder=4)
    colors = plt.get_cmap("viridis")(np.linspace(0.05, 0.9, len(sizes)))
    rng = np.random.default_rng(0)
    for size, color in zip(sizes, colors, strict=True):
        g = points[points["capacity_bytes"] == size]
        _draw_size(ax, g, at[size], coefficient, color, rng)
        ax.scatter([], [], s=16, color=color, label=f"{level} {_kb(size)}: {len(g):,} mappings")
    if searched is not None and len(searched):
        for size, color in zip(sizes, colors, strict=True):
            g = searched[searched["capacity_bytes"] == size]
            ax.scatter([at[size]], [g["dram_bytes"].min()], marker="D", s=28, color=color,
                       edgecolor="black", lw=0.6, zorder=6)
        ax.scatter([], [], marker="D", s=28, color="grey", edgecolor="black", lw=0.6,
                   label="best after local search")
    moved = any(at[size] != size for size in sizes)  # the bound is not at the level's size
    ax.scatter([], [], marker="*", s=70, color="grey", edgecolor="black", lw=0.6,
               label="best mapping, at the capacity\nof its bound" if moved
               else "best mapping, at the level's capacity")
    ax.scatter([], [], marker="*", s=70, facecolor="none", edgecolor="grey", lw=0.8,
               label="best mapping, at its uniform tile\n(all loops below DRAM)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(min(at.values()) / 3, x_end)
    ax.set_xlabel(xlabel or f"{level} size / buffer size (B)")
    ax.set_ylabel("DRAM accesses (B)")
    if title:
        ax.set_title(title, fontsize=8)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def _bytes_per_word(points: pd.DataFrame) -> float:
    """The bytes of one word of the points: their DRAM bytes over their DRAM accesses."""
    moved = points[points["dram_accesses"] > 0]
    if not len(moved):
        return 1.0
    return float(moved["dram_bytes"].iloc[0] / moved["dram_accesses"].iloc[0])


def _bound_capacities(points: pd.DataFrame) -> dict[float, float]:
    """Each swept size -> the capacity (bytes) its bound is taken at: the size itself unless
    the points say otherwise (``bound_capacity_bytes``)."""
    column = "bound_capacity_bytes" if "bound_capacity_bytes" in points else "capacity_bytes"
    return {size: float(g[column].iloc[0]) for size, g in points.groupby("capacity_bytes")}


def _draw_size(ax, g: pd.DataFrame, x: float, coefficient: float, color,
               rng: np.random.Generator) -> None:
    """One size's mappings as a column at ``x``, its best starred there and at its tile."""
    jitter = x * np.exp(rng.uniform(-0.12, 0.12, len(g)))  # spread the column a little
    ax.scatter(jitter, g["dram_bytes"], s=3, alpha=0.4, color=color, lw=0, zorder=2)
    best = g.loc[g["dram_accesses"].idxmin()]
    tile_x = best["tile_words"] * coefficient
    ax.plot([x, tile_x], [best["dram_bytes"]] * 2, ls=":", lw=0.8, color=color, zorder=4)
    ax.scatter([x], [best["dram_bytes"]], marker="*", s=70, color=color,
               edgecolor="black", lw=0.6, zorder=5)
    ax.scatter([tile_x], [best["dram_bytes"]], marker="*", s=70, facecolor="none",
               edgecolor=color, lw=0.8, zorder=5)


def _kb(size: float) -> str:
    return f"{size / 1024:g} KB"
