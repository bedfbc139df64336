"""``opatlas analyze``: one analysis (measured vs predicted vs bound, per op), several views."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from opatlas.errors import OpatlasError


def analyze(
    source: str | None = typer.Argument(None, help="A training config (or bundled name), a "
                                                   "results store (.duckdb), a torch.profiler "
                                                   "trace (.json, .json.gz), a PyBuda run folder "
                                                   "or netlist, or a tt-metal ops_perf_results "
                                                   "CSV."),
    kind: str | None = typer.Option(None, "--kind", help="Source kind, when auto-detection "
                                                         "cannot tell: config, store, trace, pybuda, "
                                                         "ttmetal."),
    as_json: bool = typer.Option(False, "--json", help="Print the analysis as one JSON object."),
    csv: Path | None = typer.Option(None, "--csv", help="Write the rows as CSV."),
    html: Path | None = typer.Option(None, "--html", help="Write a self-contained HTML report."),
    trace: Path | None = typer.Option(None, "--trace", help="Write the estimated step as a "
                                                            "Chrome/Perfetto trace (configs)."),
    tui: bool = typer.Option(False, "--tui", help="Open the terminal app (default on a terminal)."),
    measured: Path | None = typer.Option(None, "--measured", help="A results store whose "
                                         "measurements replace the config's predictions."),
    models: Path | None = typer.Option(None, "--models", help="Fitted models to predict with."),
    device: str | None = typer.Option(None, "--device", help="The device to analyse (stores) or "
                                                             "whose peaks to use (traces)."),
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
) -> None:
    """Per op: measured vs predicted vs bound, and why (compute, memory, communication ...).

    Examples:

        opatlas analyze llama2-7b --html report.html

        opatlas analyze llemma_7b_4_2_2_P --measured a100.duckdb --json

        opatlas analyze trace.json.gz --device H100 --tui

        opatlas analyze my.duckdb --csv rows.csv --save a.json

        opatlas analyze -n tt_build/model_netlist.yaml -d tt_build --html buda.html

        opatlas analyze ops_perf_results_2025_09_18.csv --ignore-signposts --json
    """
    from opatlas.analyze import api

    extra = {k: v for k, v in {"netlist": netlist, "dir": run_dir,
                               "spatial_epochs": spatial_epochs or None,
                               "start_signpost": start_signpost, "end_signpost": end_signpost,
                               "ignore_signposts": ignore_signposts or None}.items() if v}
    if source is None and load is None and (netlist or run_dir):
        source = str(netlist or run_dir)
    if kind is None and (netlist or run_dir):
        kind = "pybuda"  # only a PyBuda run takes a netlist or a run folder
    if (source is None) == (load is None):
        raise OpatlasError("give a SOURCE to analyse, or --load a saved analysis (not both)")
    if load is not None and kind not in (None, "analysis"):
        raise OpatlasError(f"--load opens a saved analysis; --kind {kind} does not apply")
    # a saved analysis is a source like the others: options it does not take are said
    analysis = api.analyze(load if load is not None else source,
                           kind="analysis" if load is not None else kind, measured=measured,
                           models=models, device=device, strict=strict, extra=extra)
    for note in analysis.summary.get("notes") or []:
        typer.echo(f"opatlas: note: {note}", err=True)
    if trace is not None:
        typer.echo(f"trace: {api.write_trace(analysis, trace)}", err=True)
    if html is not None:
        typer.echo(f"report: {api.write_html(analysis, html)}", err=True)
    if csv is not None:
        typer.echo(f"rows: {api.write_csv(analysis, csv)}", err=True)
    if save is not None:
        typer.echo(f"saved: {analysis.save(save)}", err=True)
    if as_json:
        if tui:
            typer.echo("opatlas: note: --tui does not open with --json: ignored", err=True)
        typer.echo(json.dumps(analysis.document()))
        return
    if tui or (sys.stdout.isatty() and not any((trace, html, csv, save))):
        api.run_app(analysis, source=source, kind=kind, measured=measured, device=device,
                    extra=extra or None)
    elif not any((trace, html, csv, save)):
        api.print_table(analysis)
