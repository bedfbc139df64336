"""``opatlas calibrate``: fit the Wormhole simulator to reshard measurements."""

from __future__ import annotations

from pathlib import Path

import typer

from opatlas.cli.common import checked_table, one_to_stdout


def calibrate(
    models: Path | None = typer.Option(None, "--models", help="Per-group linear models measured "
                                                             "on hardware (the seed's models CSV "
                                                             "header); default: bundled."),
    out: Path = typer.Option(Path("wormhole_params.json"), "--out",
                             help="Write the fitted simulator parameters here."),
    split: str = typer.Option("x", "--split", help="x: calibrate on input grids x <= 2, test "
                                                  "on x = 3..4; y: the same in y; random: 80/20 "
                                                  "of grid pairs; all: fit everything."),
    report: bool = typer.Option(False, "--report", help="Print the split, the fitted "
                                                       "parameters and the residuals by gather "
                                                       "degree and strategy pair."),
    report_csv: Path | None = typer.Option(None, "--report-csv", callback=checked_table,
                                           help="Per-group comparison CSV (test groups); "
                                                "- for standard output."),
    groups: int = typer.Option(1500, "--groups", min=10, help="Groups sampled for the fit."),
) -> None:
    """Fit the Wormhole simulator to hardware measurements and say how well it extrapolates.

    It fits the NoC port and link bandwidths, read and request costs, launch time and overlap.

    Use the result with --backend-opt params=FILE (or OPATLAS_WORMHOLE_PARAMS=FILE).

    Example:

        opatlas calibrate --split x --report --out wh.json
    """
    from opatlas.tenstorrent.calibrate import calibrate as run
    from opatlas.tenstorrent.calibrate import format_report, summarise

    csv_to_stdout = report_csv is not None and str(report_csv) == "-"
    one_to_stdout({"--report-csv -": csv_to_stdout, "--report": report})
    cal = run(models, split=split, max_groups=groups)
    cal.params.save(out, notes=cal.notes())
    for b in cal.at_bounds:
        typer.echo(f"opatlas: warning: {b.warning()}", err=True)
    if report_csv is not None:
        from opatlas.tables import write_table

        write_table(cal.test, report_csv, "--report-csv")
    if report:
        typer.echo(format_report(cal))
        return
    s = summarise(cal.test)
    typer.echo(f"{cal.split.description}: {s['groups']} test groups, sim/hw ns per tile median "
               f"factor {s['median_factor']:.3f}, worst gather degree "
               f"{s['worst_degree_factor']:.2f}x -> {out}", err=csv_to_stdout)


def _grid(option: str, text: str, rows_first: bool) -> tuple[int, int]:
    """``--producer``/``--consumer`` as (columns, rows), within the simulator's 8x8 grid."""
    from opatlas.errors import OpatlasError
    from opatlas.tenstorrent.noc import GRID
    from opatlas.tenstorrent.reshard import parse_grid

    order = "rows x columns" if rows_first else "columns x rows"
    try:
        a, b = parse_grid(text)
    except ValueError:
        raise OpatlasError(f"{option} {text!r}: expected a core grid XxY ({order}) of positive "
                           "integers, e.g. 7x1") from None
    if max(a, b) > GRID:
        raise OpatlasError(f"{option} {text!r}: the simulator models the {GRID}x{GRID} core "
                           f"grid; each side must be 1..{GRID}")
    return (b, a) if rows_first else (a, b)


def _strategy(text: str) -> str:
    """``--strategy`` in any case (block, Block, BLOCK); the error names the text as given."""
    from opatlas.errors import OpatlasError
    from opatlas.tenstorrent.reshard import STRATEGIES, parse_strategy

    try:
        return parse_strategy(text.strip().upper())
    except ValueError:
        raise OpatlasError(f"--strategy: unknown shard strategy {text!r}; expected one of "
                           f"{', '.join(STRATEGIES)} (any case)") from None


def reblock(
    producer: str = typer.Option(..., "--producer", help="Producer grid XxY (columns x rows), "
                                                         "each side 1..8."),
    consumer: str = typer.Option(..., "--consumer", help="Consumer grid XxY."),
    height: int = typer.Option(..., "--height", min=1, help="Tensor height in tiles."),
    width: int = typer.Option(..., "--width", min=1, help="Tensor width in tiles."),
    strategy: str = typer.Option("BLOCK", "--strategy",
                                 help="BLOCK, WIDTH or HEIGHT (any case)."),
    rows_first: bool = typer.Option(False, "--rows-first",
                                    help="Read grids as rows x columns (PyBuda's notation)."),
    params: Path | None = typer.Option(None, "--params",
                                       help="Simulator parameters (opatlas calibrate --out); "
                                            "default: the bundled calibrated ones."),
) -> None:
    """Show how a producer grid reblocks onto a consumer grid, and what it costs.

    It uses the wormhole-sim reshard simulator; "params" in the output names its parameters.

    Example (the PyBuda guide's 7x1 -> 2x1):

        opatlas reblock --producer 7x1 --consumer 2x1 --height 14 --width 4 --rows-first
    """
    import json

    from opatlas.errors import OpatlasError
    from opatlas.tenstorrent.reblock import reblock as view
    from opatlas.tenstorrent.reshard import is_tilable
    from opatlas.tenstorrent.sim import WormholeParams, calibrated_params, check_l1

    strategy = _strategy(strategy)
    grids = [_grid("--producer", producer, rows_first), _grid("--consumer", consumer, rows_first)]
    for g in grids:
        if not is_tilable(height, width, *g, strategy):
            raise OpatlasError(f"{height}x{width} tiles cannot be {strategy}-sharded on grid "
                               f"{g[0]}x{g[1]} (columns x rows) in whole tiles")
    sim = None if params is None else WormholeParams.load(params, f"--params {params}")
    for option, text, g in (("--producer", producer, grids[0]), ("--consumer", consumer, grids[1])):
        check_l1(height, width, g, f"{option} {text}", sim or calibrated_params())
    out = view(height, width, grids[0], grids[1], strategy, params=sim).as_json()
    out["params"] = "bundled calibrated" if params is None else str(params)
    if rows_first:  # the grids back in the notation they were given in
        out["producer"], out["consumer"] = (f"{g[1]}x{g[0]}" for g in grids)
    out["grid_notation"] = "rows x columns" if rows_first else "columns x rows"
    typer.echo(json.dumps(out))
