"""``opatlas analyze``: one analysis (measured vs predicted vs bound, per op), several views."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from opatlas.cli import estimate_run as er
from opatlas.cli.common import one_to_stdout
from opatlas.errors import OpatlasError

# the source kinds --kind names, as opatlas.analyze.sources registers them (a test keeps the
# two equal): here, so that --help needs no import of the readers (pandas, seconds)
KINDS = {"config": "a training config", "store": "a results store",
         "trace": "a torch.profiler trace", "pybuda": "a PyBuda run or netlist",
         "ttmetal": "a tt-metal CSV", "analysis": "an analysis kept with --save"}
KIND_LIST = ", ".join(KINDS)


def analyze(
    source: str | None = typer.Argument(None, help="A training config (YAML, a Hugging Face "
                                                   "config.json, or a bundled name: any "
                                                   "opatlas estimate config), a "
                                                   "results store (.duckdb), a torch.profiler "
                                                   "trace (.json, .json.gz), a PyBuda run folder "
                                                   "or netlist, or a tt-metal ops_perf_results "
                                                   "CSV."),
    kind: str | None = typer.Option(None, "--kind", help="Source kind, when auto-detection "
                                    "cannot tell: " + "; ".join(f"{k} ({what})"
                                                                for k, what in KINDS.items())
                                    + "."),
    as_json: bool = typer.Option(False, "--json", help="Print the analysis as one JSON object."),
    csv: Path | None = typer.Option(None, "--csv", help="Write the rows as CSV."),
    html: Path | None = typer.Option(None, "--html", help="Write a self-contained HTML report."),
    trace: Path | None = typer.Option(None, "--trace", help="Write the estimated step as a "
                                                            "Chrome/Perfetto trace (configs)."),
    tui: bool = typer.Option(False, "--tui", help="Open the terminal app (default on a terminal)."),
    measured: Path | None = typer.Option(None, "--measured", help="A results store whose "
                                         "measurements replace the config's predictions."),
    models: Path | None = typer.Option(None, "--models", help="Fitted models to predict with."),
    device: str | None = typer.Option(None, "--device", help="The device to analyse (stores), "
                                                             "whose peaks to use (traces), or "
                                                             "the chip of a tt-metal CSV "
                                                             "(wormhole_b0, blackhole)."),
    save: Path | None = typer.Option(None, "--save", help="Keep the analysis as JSON."),
    load: Path | None = typer.Option(None, "--load", help="Open an analysis kept with --save."),
    strict: bool = typer.Option(False, "--strict", help="A fallback is an error."),
    netlist: Path | None = typer.Option(None, "-n", "--netlist", help="PyBuda: the model's "
                                        "netlist (SOURCE may then be left out)."),
    spatial_epochs: bool = typer.Option(False, "-s", "--spatial-epochs", "--spatial_epochs",
                                        help="PyBuda: show spatial epochs, not temporal ones."),
    run_dir: Path | None = typer.Option(None, "-d", "--dir", help="PyBuda: the run folder "
                                        "(perf_results/, op_perf.csv, balancer_score.csv)."),
    start_signpost: str | None = typer.Option(None, "--start-signpost", help="tt-metal: "
                                              "analyse after this signpost (as tt-perf-report)."),
    end_signpost: str | None = typer.Option(None, "--end-signpost", help="tt-metal: ... "
                                            "until this signpost."),
    ignore_signposts: bool = typer.Option(False, "--ignore-signposts", help="tt-metal: the "
                                          "whole file, whatever its signposts."),
    megatron_args: str | None = er.MegatronOpt,
    gpus: int | None = typer.Option(None, "--gpus", min=1, help="Configs: the GPUs a Hugging "
                                    "Face config or Megatron arguments run on (dp = GPUs / "
                                    "(tp·pp)), as opatlas estimate --gpus."),
    gpus_per_node: int | None = er.GpusPerNodeOpt,
    sets: list[str] | None = er.SetOpt,
    analytical: bool = typer.Option(False, "--analytical", help="Configs: roofline ops and "
                                    "alpha-beta collectives, no data (as opatlas estimate)."),
) -> None:
    """Per op: measured vs predicted vs bound, and why (compute, memory, communication ...).

    Examples:

        opatlas analyze llama2-7b --html report.html

        opatlas analyze llemma_7b_4_2_2_P --measured a100.duckdb --json

        opatlas analyze qwen3-8b --gpus 64 --set parallel.tp=4 --set model.seq_len=8192

        opatlas analyze trace.json.gz --device H100 --tui

        opatlas analyze my.duckdb --csv rows.csv --save a.json

        opatlas analyze -n tt_build/model_netlist.yaml -d tt_build --html buda.html

        opatlas analyze tests/data/tenstorrent/ops_perf_results_2025_09_18_11_39_20.csv \\
            --ignore-signposts --json
    """
    from opatlas.analyze import api

    _check_kind(kind)
    extra = {k: v for k, v in {"netlist": netlist, "dir": run_dir,
                               "spatial_epochs": spatial_epochs or None,
                               "start_signpost": start_signpost, "end_signpost": end_signpost,
                               "ignore_signposts": ignore_signposts or None,
                               "megatron_args": megatron_args, "gpus": gpus,
                               "gpus_per_node": gpus_per_node, "sets": sets,
                               "analytical": analytical or None}.items() if v}
    _check_pybuda_paths(netlist, run_dir)
    if source is None and load is None and (netlist or run_dir):
        source = str(netlist or run_dir)
    if kind is None and (netlist or run_dir) and _kind_of(source) in (None, "pybuda", "config"):
        kind = "pybuda"  # only a PyBuda run takes a netlist or a run folder
    if megatron_args is not None:
        source, kind = _megatron_source(megatron_args, source, load, kind)
    _check_source(source, load, kind)
    if load is None and kind is None:  # detected once, here: what it is decides what applies
        kind = _kind_of(source)  # None: the reader names what it cannot tell
    _check_trace(trace, source, load, kind)
    if tui and not as_json and not _terminal():  # refused before minutes of analysis
        raise OpatlasError("--tui needs a terminal (standard input and output)")
    one_to_stdout({**{f"{flag} -": str(path) == "-" for flag, path in (
        ("--csv", csv), ("--html", html), ("--trace", trace), ("--save", save))},
        "--json": as_json})
    # a saved analysis is a source like the others: options it does not take are said
    analysis = api.analyze(load if load is not None else source,
                           kind="analysis" if load is not None else kind, measured=measured,
                           models=models, device=device, strict=strict, extra=extra)
    for note in analysis.summary.get("notes") or []:
        typer.echo(f"opatlas: note: {note}", err=True)
    files = {"trace": trace, "report": html, "rows": csv, "saved": save}
    try:
        _write_files(analysis, files)
        if as_json:
            if tui:
                typer.echo("opatlas: note: --tui does not open with --json: ignored", err=True)
            typer.echo(json.dumps(analysis.document()))
            return
        if tui or (_terminal() and not any(files.values())):
            api.run_app(analysis, source=source, kind=kind, measured=measured, models=models,
                        device=device, strict=strict, extra=extra or None)
        elif not any(files.values()):
            api.print_table(analysis)
    except BrokenPipeError:
        from opatlas.console import stdout_gone

        stdout_gone()


SOURCES = ("a training config or bundled name (e.g. llama2-7b), a results store (.duckdb), a "
           "torch.profiler trace (.json, .json.gz), a PyBuda run folder or netlist, or a "
           "tt-metal ops_perf_results CSV")


def _terminal() -> bool:
    """Whether the terminal app can run: it reads keys from standard input and draws on
    standard output; on a pipe or a file it would wait for keys that never come."""
    return sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()


def _check_kind(kind: str | None) -> None:
    """An unknown --kind, refused with the list the help gives (before anything is read)."""
    if kind is not None and kind not in KINDS:
        raise OpatlasError(f"unknown --kind {kind!r}; known: {KIND_LIST}")


def _check_source(source: str | None, load: Path | None, kind: str | None) -> None:
    if source is None and load is None:
        raise OpatlasError(f"no SOURCE given: name what to analyse ({SOURCES}), or --load an "
                           f"analysis kept with --save")
    if source is not None and load is not None:
        raise OpatlasError(f"give a SOURCE ({source}) or --load {load}, not both")
    if load is not None and kind not in (None, "analysis"):
        raise OpatlasError(f"--load opens a saved analysis; --kind {kind} does not apply")
    if load is not None and load.is_dir():
        raise OpatlasError(f"--load {load}: is a folder; give the .json file kept with --save")


def _megatron_source(args: str, source: str | None, load: Path | None, kind: str | None
                     ) -> tuple[str, str]:
    """(source, kind) for Megatron-LM arguments, which stand for the config as in ``opatlas
    estimate``: the source is their @file, or a label for inline arguments."""
    from opatlas.analyze.sources.config import MEGATRON_LABEL

    if source is not None or load is not None:
        raise OpatlasError(f"give a SOURCE ({source or load}) or --megatron-args, not both "
                           f"(use --set for the cluster, e.g. --set cluster.preset=dgx-a100)")
    if kind not in (None, "config"):
        raise OpatlasError(f"--megatron-args describe a training run (--kind config), not "
                           f"--kind {kind}")
    return (args if args.startswith("@") else MEGATRON_LABEL), "config"


def _check_trace(trace: Path | None, source: str | None, load: Path | None,
                 kind: str | None) -> None:
    """--trace needs a config: refused before a store or a trace is read (minutes for a big
    store), not after. A saved analysis (--load, or as the SOURCE) is checked once opened,
    which is quick: it may be a config's."""
    if trace is None or load is not None or kind in (None, "config", "analysis"):
        return
    raise OpatlasError(f"--trace exports an estimated step: it needs a training config, not "
                       f"a {kind} ({source})")


def _kind_of(path: str | Path | None) -> str | None:
    """The kind auto-detection sees in ``path``, None where it sees none."""
    from opatlas.analyze.sources import detect

    if path is None:
        return None
    try:
        return detect(Path(path)).name
    except OpatlasError:
        return None


def _check_pybuda_paths(netlist: Path | None, run_dir: Path | None) -> None:
    """-n/--netlist and -d/--dir name a PyBuda netlist and run folder: another kind of file
    given there (a tt-metal CSV) is said, not read as YAML."""
    from opatlas.analyze.sources import kinds

    for flag, given, wants in (("--netlist", netlist, "a PyBuda netlist (*netlist.yaml)"),
                               ("--dir", run_dir, "a PyBuda run folder (perf_results/, "
                                                  "op_perf.csv, balancer_score.csv)")):
        if given is None or not given.exists():
            continue  # a missing path is the PyBuda reader's to name
        other = _kind_of(given)
        if other not in (None, "pybuda", "config"):
            raise OpatlasError(f"{flag} {given}: this is {kinds()[other].help}, not {wants}; "
                               f"analyse it as the SOURCE: opatlas analyze {given}")
        if flag == "--dir" and not given.is_dir():
            raise OpatlasError(f"--dir {given}: a file, but --dir takes {wants}; give a "
                               f"netlist with -n/--netlist")


def _write_files(analysis: Any, files: dict[str, Path | None]) -> None:
    """Each output asked for ('trace', 'report', 'rows', 'saved': path); the one to standard
    output last, so that a reader leaving early (| head) costs no file."""
    from opatlas.analyze import api

    writers = {"trace": api.write_trace, "report": api.write_html, "rows": api.write_csv,
               "saved": lambda a, p: a.save(p)}
    named = [(label, path) for label, path in files.items() if path is not None]
    for label, path in sorted(named, key=lambda item: str(item[1]) == "-"):
        typer.echo(f"{label}: {writers[label](analysis, path)}", err=True)
