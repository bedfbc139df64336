"""``opatlas estimate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from opatlas.cli import estimate_run as er
from opatlas.cli.common import checked_plot
from opatlas.errors import OpatlasError


def estimate(
    config: str | None = typer.Argument(None, help="Config YAML (opatlas or estimate-train-time), a "
                                           "Hugging Face config.json, or a "
                                           "bundled example: llama2-7b, llama2-13b, llama2-70b, "
                                           "gpt3-175b, mixtral-8x7b, llemma_7b_4_2_2_P, "
                                           "llama-3.1-8b, llama-3.1-70b, qwen2.5-7b, qwen3-8b, "
                                           "mixtral-8x7b-v0.1."),
    as_json: bool = typer.Option(False, "--json", help="Print the estimate (or the search's "
                                                         "best layouts) as JSON."),
    plot: Path | None = typer.Option(None, "--plot", callback=checked_plot,
                                     help="Stacked-bar plot of the breakdown."),
    do_search: bool = typer.Option(False, "--search", help="Rank the layouts of --gpus GPUs."),
    gpus: int | None = typer.Option(None, "--gpus", min=1,
                                   help="GPUs: the ones --search lays out, or the cluster a "
                                        "Hugging Face config or Megatron arguments run on."),
    top: int | None = typer.Option(None, "--top", min=1,
                                   help="How many layouts --search shows (default 10)."),
    analytical: bool = typer.Option(False, "--analytical",
                                    help="Roofline ops and alpha-beta collectives: no data."),
    megatron_args: str | None = er.MegatronOpt,
    gpus_per_node: int | None = er.GpusPerNodeOpt,
    sets: list[str] | None = er.SetOpt,
    tokens: str | None = er.TokensOpt,
    steps: int | None = er.StepsOpt,
    gpu_hour_price: float | None = er.PriceOpt,
    strict: bool = typer.Option(False, "--strict", help="Every fallback is an error (a key "
                                                        "left to its default, or a value a "
                                                        "Hugging Face config.json leaves out "
                                                        "(--set it); data mode: an op "
                                                        "or collective without measured data, "
                                                        "ops.strict; a device without a memory "
                                                        "size), and so is a layout that does "
                                                        "not fit in memory."),
) -> None:
    """Estimate the time of one optimizer step, its breakdown, throughput, MFU and memory.

    Examples:

        opatlas estimate llemma_7b_4_2_2_P

        opatlas estimate llama2-70b --json --plot l70.png

        opatlas estimate llama2-7b --search --gpus 64 --top 5

        opatlas estimate llama-3.1-8b --gpus 64 --search --set model.seq_len=8192 --tokens 2T

        opatlas estimate --megatron-args @examples/megatron/gpt3-175b.args --gpus 1024
    """
    from opatlas.estimate import estimate_step, search

    inputs = er.load(config, megatron_args, gpus, gpus_per_node, sets, do_search, strict,
                     analytical)
    cfg, input_steps, notes = inputs.config, inputs.steps, inputs.notes
    if top is not None and not do_search:
        typer.echo("note: --top ranks the layouts of --search; ignored without it", err=True)
    top = 10 if top is None else top
    if strict and cfg.ops.mode == "analytical":
        typer.echo("note: --strict: ops.mode is analytical, so every op is timed by the roofline "
                   "by choice and nothing can fall back (ops.mode: data to use measurements)",
                   err=True)
    if do_search:
        if gpus is None:
            raise OpatlasError("--search needs --gpus N")
        fixed = er.pinned_by_set(inputs.pinned)
        if er.wants_run(tokens, steps, input_steps, gpu_hour_price):
            ranked, n, oom = er.search_runs(cfg, gpus, top, tokens, steps, gpu_hour_price,
                                            input_steps, fixed)
            er.fallback_assumptions(cfg, [e for e, _ in ranked], notes)
            er.print_search_runs(ranked, n, oom, as_json, notes)
            if plot is not None and ranked:
                _plot([e for e, _ in ranked], plot, f"{cfg.model.name}: fastest runs on {gpus} GPUs")
            return
        best, n, oom = search(cfg, gpus, top, fixed)
        er.fallback_assumptions(cfg, best, notes)
        if as_json:
            typer.echo(json.dumps({"evaluated": n, "oom": oom, "assumptions": notes,
                                   "top": [e.as_json() for e in best]}))
        else:
            _print_search(best, n, oom)
        if plot is not None and best:
            _plot(best, plot, f"{cfg.model.name}: best layouts of {gpus} GPUs")
        return
    est = estimate_step(cfg)
    er.fallback_assumptions(cfg, [est], notes)
    _check_fits(est, strict, as_json)
    run = er.run_of(est, tokens, steps, gpu_hour_price, input_steps) \
        if er.wants_run(tokens, steps, input_steps, gpu_hour_price) else None
    if plot is not None:
        _plot([est], plot)
    if as_json:
        typer.echo(json.dumps({**est.as_json(), "assumptions": notes,
                               **({"run": run.as_json()} if run else {})}))
        return
    _print_estimate(cfg, est, run, gpu_hour_price)


def _plot(estimates: list[Any], path: Path, title: str = "") -> None:
    """``--plot``: the breakdown figure, and where it went on stderr (``--json`` keeps
    standard output to itself)."""
    from opatlas.estimate.plot import plot_breakdown

    typer.echo(f"wrote {plot_breakdown(estimates, path, title)}", err=True)


def _check_fits(est: Any, strict: bool, as_json: bool) -> None:
    """A layout that does not fit: an error under --strict; said on stderr for --json (the
    text output says it in its verdict)."""
    from opatlas.estimate.inputs import out_of_memory

    msg = out_of_memory(est)
    if msg is None:
        return
    if strict:
        raise OpatlasError(f"{msg}; --strict")
    if as_json:
        typer.echo(f"note: {msg}; --strict makes this an error", err=True)


def _print_estimate(cfg: Any, est: Any, run: Any, price: float | None) -> None:
    from rich.table import Table

    from opatlas.console import make_console


    c = make_console()
    table = Table("part", "seconds", "share", title=f"{cfg.model.name} on {cfg.gpus} x "
                                                     f"{cfg.cluster.device}")
    for k, v in est.breakdown.items():
        table.add_row(k, f"{v:.4f}", f"{100 * v / est.step_time_s:.1f}%")
    c.print(table)
    import math

    verdict = ("fits" if est.fits else "OUT OF MEMORY") \
        if math.isfinite(est.memory_limit_gib) else "not checked: memory size unknown"
    limit = f"{est.memory_limit_gib:.0f}" if math.isfinite(est.memory_limit_gib) else "?"
    where = (f" (pipeline stage {est.memory_stage}, the fullest)"
             if est.config.parallel.pp > 1 else "")
    c.print(f"step time {est.step_time_s:.3f} s   tokens/s {est.tokens_per_s:,.0f}   "
            f"MFU {100 * est.mfu:.1f}%   memory {est.memory_gib:.1f} of {limit} GiB per "
            f"GPU{where} ({verdict})")
    if run is not None:  # est.notes were said on stderr as they arose
        er.print_run(run, price)


def _print_search(best: list, n: int, oom: int) -> None:
    from rich.table import Table

    from opatlas.console import print_wide
    from opatlas.estimate.plot import label

    table = Table("#", "layout", "step s", "tokens/s", "MFU", "GiB", "same time and memory",
                  title=er.search_title(n, oom, best))
    for i, e in enumerate(best, 1):
        table.add_row(str(i), label(e).replace("\n", " "), f"{e.step_time_s:.3f}",
                      f"{e.tokens_per_s:,.0f}", f"{100 * e.mfu:.1f}%", f"{e.memory_gib:.1f}",
                      er.same_as(e))
    print_wide(table)
    typer.echo(er.LAYOUT_LEGEND)
