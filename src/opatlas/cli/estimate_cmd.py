"""``opatlas estimate``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from opatlas.errors import OpatlasError


def estimate(
    config: str = typer.Argument(..., help="Config YAML (opatlas or estimate-train-time), or a "
                                           "bundled example: llama2-7b, llama2-13b, llama2-70b, "
                                           "gpt3-175b, mixtral-8x7b, llemma_7b_4_2_2_P."),
    as_json: bool = typer.Option(False, "--json"),
    plot: Path | None = typer.Option(None, "--plot", help="Stacked-bar plot of the breakdown."),
    do_search: bool = typer.Option(False, "--search", help="Rank the layouts of --gpus GPUs."),
    gpus: int | None = typer.Option(None, "--gpus", min=1),
    top: int = typer.Option(10, "--top", min=1),
    analytical: bool = typer.Option(False, "--analytical",
                                    help="Roofline ops and alpha-beta collectives: no data."),
    strict: bool = typer.Option(False, "--strict", help="Data mode: an op without measured "
                                                        "data is an error, not a roofline "
                                                        "fallback (ops.strict)."),
) -> None:
    """Estimate the time of one optimizer step, its breakdown, throughput, MFU and memory.

    Examples:

        opatlas estimate llemma_7b_4_2_2_P

        opatlas estimate llama2-70b --json --plot l70.png

        opatlas estimate llama2-7b --search --gpus 64 --top 5
    """
    from opatlas.estimate import estimate_step, load_config, search

    cfg = load_config(config)
    if strict:
        cfg = cfg.model_copy(update={"ops": cfg.ops.model_copy(update={"strict": True})})
    if analytical:
        cfg = cfg.model_copy(update={"ops": cfg.ops.model_copy(update={"mode": "analytical"}),
                                     "cluster": cfg.cluster.model_copy(update={"nccl_data": None})})
    if do_search:
        if gpus is None:
            raise OpatlasError("--search needs --gpus N")
        best, n, oom = search(cfg, gpus, top)
        if as_json:
            typer.echo(json.dumps({"evaluated": n, "oom": oom,
                                   "top": [e.as_json() for e in best]}))
        else:
            _print_search(best, n, oom)
        if plot is not None and best:
            from opatlas.estimate.plot import plot_breakdown

            plot_breakdown(best, plot, f"{cfg.model.name}: best layouts of {gpus} GPUs")
        return
    est = estimate_step(cfg)
    if plot is not None:
        from opatlas.estimate.plot import plot_breakdown

        plot_breakdown([est], plot)
    if as_json:
        typer.echo(json.dumps(est.as_json()))
        return
    c = Console()
    table = Table("part", "seconds", "share", title=f"{cfg.model.name} on {cfg.gpus} x "
                                                     f"{cfg.cluster.device}")
    for k, v in est.breakdown.items():
        table.add_row(k, f"{v:.4f}", f"{100 * v / est.step_time_s:.1f}%")
    c.print(table)
    c.print(f"step time {est.step_time_s:.3f} s   tokens/s {est.tokens_per_s:,.0f}   "
            f"MFU {100 * est.mfu:.1f}%   memory {est.memory_gib:.1f} of "
            f"{est.memory_limit_gib:.0f} GiB per GPU ({'fits' if est.fits else 'OUT OF MEMORY'})")
    for note in est.notes:
        c.print(f"note: {note}")


def _print_search(best: list, n: int, oom: int) -> None:
    from opatlas.estimate.plot import label

    table = Table("#", "layout", "step s", "tokens/s", "MFU", "GiB",
                  title=f"{n} layouts evaluated, {oom} out of memory")
    for i, e in enumerate(best, 1):
        table.add_row(str(i), label(e).replace("\n", " "), f"{e.step_time_s:.3f}",
                      f"{e.tokens_per_s:,.0f}", f"{100 * e.mfu:.1f}%", f"{e.memory_gib:.1f}")
    Console().print(table)
