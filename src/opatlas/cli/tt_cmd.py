"""``opatlas calibrate``: fit the Wormhole simulator to reshard measurements."""

from __future__ import annotations

from pathlib import Path

import typer


def calibrate(
    models: Path | None = typer.Option(None, "--models", help="Per-group linear models measured "
                                                             "on hardware (the seed's models CSV "
                                                             "header); default: bundled."),
    out: Path = typer.Option(Path("wormhole_params.json"), "--out",
                             help="Write the fitted simulator parameters here."),
    report: Path | None = typer.Option(None, "--report", help="Per-group comparison CSV."),
    groups: int = typer.Option(1500, "--groups", min=10, help="Groups sampled for the fit."),
) -> None:
    """Fit the simulator's per-read cost, NoC bandwidth, launch time and mesh contention.

    Use the result with --backend-opt params=FILE (or OPATLAS_WORMHOLE_PARAMS=FILE).

    Example:

        opatlas calibrate --out wh.json --report calib.csv
    """
    import numpy as np

    from opatlas.tenstorrent.calibrate import calibrate as run

    params, rep = run(models, max_groups=groups)
    params.save(out)
    if report is not None:
        rep.to_csv(report, index=False)
    typer.echo(f"noc {params.noc_bytes_per_cycle:.2f} B/cycle, read cost {params.tx_ns:.3g} ns, "
               f"launch {params.launch_ns:.0f} ns, mesh {params.hop_bytes_per_cycle:.0f} "
               f"byte-hops/cycle -> {out}")
    for name, g in (("held-out grid pairs", rep[rep["held_out"]]), ("all groups", rep)):
        q = g["ratio"].quantile([0.25, 0.75]).to_numpy()
        typer.echo(f"{name}: {len(g)} groups, sim/hardware ns per tile median "
                   f"{g['ratio'].median():.3f} (IQR {q[0]:.2f}-{q[1]:.2f}), within 25%: "
                   f"{100 * float(np.mean(np.abs(g['ratio'] - 1) < 0.25)):.0f}%")


def reblock(
    producer: str = typer.Option(..., "--producer", help="Producer grid XxY (columns x rows)."),
    consumer: str = typer.Option(..., "--consumer", help="Consumer grid XxY."),
    height: int = typer.Option(..., "--height", help="Tensor height in tiles."),
    width: int = typer.Option(..., "--width", help="Tensor width in tiles."),
    strategy: str = typer.Option("BLOCK", "--strategy"),
    rows_first: bool = typer.Option(False, "--rows-first",
                                    help="Read grids as rows x columns (PyBuda's notation)."),
) -> None:
    """Show how a producer grid reblocks onto a consumer grid, and what it costs.

    Example (the PyBuda guide's 7x1 -> 2x1):

        opatlas reblock --producer 7x1 --consumer 2x1 --height 14 --width 4 --rows-first
    """
    import json

    from opatlas.tenstorrent.reblock import reblock as view
    from opatlas.tenstorrent.reshard import is_tilable, parse_grid

    grids = []
    for g in (producer, consumer):
        a, b = parse_grid(g)
        grids.append((b, a) if rows_first else (a, b))
    for g in grids:
        if not is_tilable(height, width, *g, strategy):
            from opatlas.errors import OpatlasError

            raise OpatlasError(f"{height}x{width} tiles cannot be {strategy}-sharded on grid "
                               f"{g[0]}x{g[1]} (columns x rows) in whole tiles")
    typer.echo(json.dumps(view(height, width, grids[0], grids[1], strategy).as_json()))
