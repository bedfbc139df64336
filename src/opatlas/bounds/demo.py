"""The bounds' part of ``opatlas demo``: the 4096³ GEMM frontier, its plot and CSV."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from opatlas.bounds.einsum import gemm
from opatlas.bounds.figures import write_artifact_csv
from opatlas.bounds.frontier import frontier
from opatlas.bounds.plots import plot_frontiers

H100_L2_BYTES = 50 * 2**20


def demo_bound(out: Path, console: Console) -> None:
    console.rule("[bold]2. bound: Orojenesis data-movement frontier of a 4096³ GEMM")
    f = frontier(gemm(4096, 4096, 4096, word_bytes=2))
    at_l2 = f.lookup(H100_L2_BYTES / 2)
    console.print(f"  {f.tilings} tilings, {f.mapspace_size} mappings, {len(f.buffer)} frontier "
                  f"points; algorithmic minimum {f.algo_min:,} words "
                  f"(OI max {f.oi()[-1]:.1f} op/B in bf16)")
    console.print(f"  maximal effectual buffer {f.max_effectual_buffer:,} words "
                  f"= {f.max_effectual_ratio:.4f} of the operands")
    console.print(f"  with an H100-sized 50 MiB buffer (bf16): ≥ {at_l2 * 2 / 2**20:,.1f} MiB "
                  f"of DRAM traffic")
    plot = plot_frontiers([f], out / "gemm4096_bound.png", legends=["4096³ GEMM"],
                          plot_min=True, y_end=2e8)
    write_artifact_csv(f, out / "gemm4096_orojenesis.csv")
    f.to_frame().to_csv(out / "gemm4096_frontier.csv", index=False)
    console.print(f"  plot: {plot}")
