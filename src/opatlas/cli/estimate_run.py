"""``opatlas estimate``'s inputs beyond its own YAML (Hugging Face configs, Megatron-LM
arguments, ``--set``) and whole-run answers (``--tokens``/``--steps``): parsing and printing
only; the work is in :mod:`opatlas.estimate.inputs` and :mod:`opatlas.estimate.run`."""

from __future__ import annotations

import json
import math
from typing import Any

import typer

MegatronOpt = typer.Option(
    None, "--megatron-args", help="Megatron-LM launch arguments, as one string or @args.txt "
                                  "(instead of a config; add --gpus for the world size).")
GpusPerNodeOpt = typer.Option(None, "--gpus-per-node", min=1,
                              help="GPUs per node (cluster.gpus_per_node).")
SetOpt = typer.Option(None, "--set", help="Override one config key, e.g. --set parallel.tp=4 "
                                          "(repeatable; validated like the file).")
TokensOpt = typer.Option(None, "--tokens", help="Whole run of this many tokens (2T, 300B): "
                                                "steps, days, GPU-hours.")
StepsOpt = typer.Option(None, "--steps", min=1, help="Whole run of this many optimizer steps.")
PriceOpt = typer.Option(None, "--gpu-hour-price", min=0.0,
                        help="Price of one GPU-hour, for the run's cost.")


def load(config: str | None, megatron_args: str | None, gpus: int | None,
         gpus_per_node: int | None, sets: list[str] | None, search: bool,
         strict: bool = False, analytical: bool = False) -> Any:
    """The inputs (config, the run length the input asks for, notes, the keys a search
    holds), with ``--strict`` and ``--analytical`` applied; notes also go to stderr.
    ``strict``: Megatron flags that are not modelled, and assumed defaults (a Hugging Face
    config.json's left-out fields among them), are errors."""
    from opatlas.estimate.inputs import load_inputs, with_flags

    notes: list[str] = []
    try:
        inputs = load_inputs(config, megatron_args=megatron_args, gpus=gpus,
                             gpus_per_node=gpus_per_node, sets=sets or (), search=search,
                             strict=strict, notes=notes, analytical=analytical)
        inputs.config = with_flags(inputs.config, strict, analytical, notes)
    finally:  # what was assumed before an error explains it
        say(notes)
    return inputs


def say(notes: list[str]) -> None:
    for note in notes:
        typer.echo(f"note: {note}", err=True)


def fallback_assumptions(cfg: Any, estimates: list, notes: list[str]) -> None:
    """What the roofline or the alpha-beta model that measured data fell back to assumed
    (default efficiencies or links), and how the NCCL samples timed a collective they imply
    but lack (a reduce-scatter): said on stderr and added to ``notes``."""
    from opatlas.estimate.inputs import derived_collectives
    from opatlas.estimate.inputs import fallback_assumptions as assumed

    found = assumed(cfg, estimates) + derived_collectives(cfg, estimates)
    new = [n for n in found if n not in notes]
    say(new)
    notes.extend(new)


def wants_run(tokens: str | None, steps: int | None, input_steps: int | None,
              price: float | None) -> bool:
    """Whether a whole run was asked for; a price without one is an error, not ignored."""
    wanted = tokens is not None or steps is not None or input_steps is not None
    if price is not None and not wanted:
        from opatlas.errors import OpatlasError

        raise OpatlasError("--gpu-hour-price prices a whole run: add --tokens or --steps")
    return wanted


def _budget(tokens: str | None, steps: int | None, input_steps: int | None
            ) -> tuple[float | None, int | None]:
    from opatlas.errors import OpatlasError
    from opatlas.estimate.run import parse_count

    if tokens is not None and steps is not None:
        raise OpatlasError("give --tokens or --steps, not both")
    if tokens is not None:
        return parse_count(tokens), None
    if steps is None and input_steps is not None:
        typer.echo(f"note: whole run of {plural(input_steps, 'step')}, from the Megatron "
                   f"arguments' --train-iters/--train-samples (--tokens or --steps to change)",
                   err=True)
    return None, steps or input_steps


def run_of(est: Any, tokens: str | None, steps: int | None, price: float | None,
           input_steps: int | None) -> Any:
    from opatlas.estimate.run import whole_run

    budget_tokens, budget_steps = _budget(tokens, steps, input_steps)
    run = whole_run(est, budget_tokens, budget_steps, price)
    if budget_tokens is not None and run.tokens > budget_tokens:  # said, not silently more
        typer.echo(f"note: --tokens {_human(budget_tokens)} rounded up to {run.steps:,} whole "
                   f"step(s) of {_human(run.tokens / run.steps)} tokens = "
                   f"{_human(run.tokens)} tokens", err=True)
    return run


def _human(count: float) -> str:
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{count / size:.3g}{suffix}"
    return f"{count:g}"


def print_run(run: Any, price: float | None) -> None:
    from opatlas.console import make_console

    c = make_console()
    for line in run_lines(run, price):
        c.print(line)


def run_lines(run: Any, price: float | None) -> list[str]:
    """The whole run as text: a short run's time and GPU-hours keep significant digits
    (a 5 s run on 64 GPUs is 0.0889 GPU-hours, not 0); --json keeps full precision."""
    cost = f"   cost {significant(run.cost)} at {price:g} per GPU-hour" \
        if run.cost is not None else ""
    return [f"whole run: {_human(run.tokens)} tokens in {plural(run.steps, 'step')} of "
            f"{_human(run.tokens / run.steps)} tokens",
            f"  {duration(run.days * 86400.0)}   "
            f"{plural_text(significant(run.gpu_hours), 'GPU-hour')}{cost}"]


def significant(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits, in plain notation (0.0889, 12.3, 123),
    whole and with thousands separators from 10**digits up (184,320)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    places = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    shown = f"{x:.{places}f}"
    if abs(float(shown)) >= 10 ** digits:  # 999.6 rounds up to 1,000
        return f"{x:,.0f}"
    return shown


def duration(seconds: float) -> str:
    """A run's wall-clock time: days (two decimals) from one day up, else hours, minutes or
    seconds with significant digits."""
    if seconds >= 86400.0:
        return f"{seconds / 86400.0:,.2f} days"
    for size, unit in ((3600.0, "hour"), (60.0, "minute"), (1.0, "second")):
        if seconds >= size:
            return plural_text(significant(seconds / size), unit)
    return plural_text(significant(seconds), "second")


def days_cell(days: float) -> str:
    """The search table's days: two decimals from one day up, significant digits below."""
    return f"{days:,.2f}" if days >= 1 else significant(days)


def plural(count: int, noun: str) -> str:
    """``1 step``, ``2,000 steps``."""
    return plural_text(f"{count:,}", noun)


def plural_text(shown: str, noun: str) -> str:
    """``noun`` after the number as shown: singular only for exactly ``1``."""
    return f"{shown} {noun}" if shown == "1" else f"{shown} {noun}s"


def search_runs(cfg: Any, gpus: int, top: int, tokens: str | None, steps: int | None,
                price: float | None, input_steps: int | None,
                fixed: dict[str, object]) -> tuple[list, int, int]:
    """The ``top`` layouts by time to train the budget: ([(estimate, run)], evaluated, oom)."""
    from opatlas.estimate import search
    from opatlas.estimate.run import rank_by_run

    budget_tokens, budget_steps = _budget(tokens, steps, input_steps)
    fits, n, oom = search(cfg, gpus, top=10**9, fixed=fixed)
    return rank_by_run(fits, budget_tokens, budget_steps, price)[:top], n, oom


LAYOUT_LEGEND = ("layout: dp tp pp (v: interleaved chunks) ep, sp = sequence parallel, mb = "
                 "micro-batch, z = ZeRO stage, then the recomputation; each is a --set "
                 "parallel.KEY (training.micro_batch for mb)")


def print_search_runs(ranked: list, n: int, oom: int, as_json: bool,
                      assumptions: list[str] | None = None) -> None:

    from rich.table import Table

    from opatlas.console import print_wide
    from opatlas.estimate.plot import label

    if as_json:
        typer.echo(json.dumps({"evaluated": n, "oom": oom, "ranked_by": "time to train",
                               "assumptions": assumptions or [],
                               "top": [{**e.as_json(), "run": r.as_json()} for e, r in ranked]}))
        return
    priced = bool(ranked) and ranked[0][1].cost is not None
    table = Table("#", "layout", "step s", "tokens/s", "MFU", "GiB", "days", "GPU-hours",
                  *(["cost"] if priced else []), "same time and memory",
                  title=search_title(n, oom, [e for e, _ in ranked]) + "; ranked by time to train")
    for i, (e, r) in enumerate(ranked, 1):
        table.add_row(str(i), label(e).replace("\n", " "), f"{e.step_time_s:.3f}",
                      f"{e.tokens_per_s:,.0f}", f"{100 * e.mfu:.1f}%", f"{e.memory_gib:.1f}",
                      days_cell(r.days), significant(r.gpu_hours),
                      *([significant(r.cost)] if priced else []), same_as(e))
    print_wide(table)
    typer.echo(LAYOUT_LEGEND)


def search_title(n: int, oom: int, shown: list) -> str:
    """The search table's title; memory that was not checked (a device of unknown memory
    size) is not counted as fitting."""
    import math

    if shown and not math.isfinite(shown[0].memory_limit_gib):
        return f"{n} layouts evaluated, memory not checked (its size is unknown)"
    return f"{n} layouts evaluated, {oom} out of memory"


def same_as(e: Any) -> str:
    """The layouts that tie with ``e`` in step time and memory, or '-'."""
    from opatlas.estimate.plot import layout_label

    return "; ".join(layout_label(c).replace("\n", " ") for c in e.equivalent) or "-"


def pinned_by_set(fixed: dict[str, object]) -> dict[str, object]:
    """The layout keys ``--set`` gives, which ``--search`` then keeps; said on stderr."""
    if fixed:
        typer.echo("note: --search keeps " + ", ".join(f"{k} = {v}" for k, v in fixed.items())
                   + " (from --set)", err=True)
    return fixed
