"""``opatlas bound``: data-movement bounds of single Einsums and chains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from opatlas.errors import OpatlasError

if TYPE_CHECKING:
    from opatlas.bounds import Einsum, Frontier

app = typer.Typer(help="Orojenesis data-movement bounds: minimum backing-store traffic for "
                       "every on-chip buffer size.", no_args_is_help=True)

JsonOpt = typer.Option(False, "--json", help="Print the frontier as JSON.")
CsvOpt = typer.Option(None, "--csv", help="Write the tidy frontier CSV (.csv or .parquet).")
ArtCsvOpt = typer.Option(None, "--artifact-csv", help="Write the artifact's orojenesis.csv.")
PlotOpt = typer.Option(None, "--plot", help="Write the accesses-vs-buffer plot (.png/.pdf).")
AtOpt = typer.Option(None, "--at", help="Print the bound at this buffer size (words).")
WordOpt = typer.Option(1, "--word-bytes", min=1, help="Bytes per word (1 as the artifact).")
ImperfectOpt = typer.Option(False, "--imperfect",
                            help="Also allow ceil (imperfect) tiles: beyond the artifact.")


def _emit(e: Einsum, as_json: bool, csv: Path | None, artifact_csv: Path | None,
          plot: Path | None, at: float | None, imperfect: bool) -> None:
    from opatlas.bounds import frontier
    f = frontier(e, imperfect=imperfect)
    if csv is not None:
        df = f.to_frame()
        df.to_parquet(csv, index=False) if csv.suffix == ".parquet" else df.to_csv(csv, index=False)
    if artifact_csv is not None:
        from opatlas.bounds.figures import write_artifact_csv

        write_artifact_csv(f, artifact_csv)
    if plot is not None:
        from opatlas.bounds.plots import plot_frontiers

        plot_frontiers([f], plot, plot_min=True, y_end=float(f.buffer[-1]) * 10)
    if at is not None:
        value = f.lookup(at)
        if as_json:
            typer.echo(json.dumps({"buffer": int(at) if float(at).is_integer() else at,
                                   "accesses": value,
                                   "oi": None if value is None else float(f.oi(value))}))
        else:
            typer.echo(f"at {at:,.0f} words: " + ("below the smallest mapping's buffer"
                                               if value is None else f"{value:,} accesses"))
        return
    if as_json:
        typer.echo(json.dumps(f.to_json()))
        return
    _print(f)


def _print(f: Frontier) -> None:
    table = Table("buffer (words)", "accesses (words)", "OI (op/B)", "mapping",
                  title=f"{f.einsum.name}: {len(f.buffer)} frontier points of {f.tilings} "
                        f"tilings / {f.mapspace_size} mappings"
                        + (" [imperfect tiling]" if f.imperfect else ""))
    for b, a, o, m in zip(f.buffer, f.accesses, f.oi(), f.to_frame()["mapping"], strict=True):
        table.add_row(f"{b:,}", f"{a:,}", f"{o:.2f}", m)
    console = Console()
    console.print(table)
    console.print(f"algo min {f.algo_min:,}  algo max {f.algo_max:,}  maximal effectual "
                  f"buffer {f.max_effectual_buffer:,} ({100 * f.max_effectual_ratio:.2f}% of "
                  f"the operands)")


@app.command("gemm")
def gemm_cmd(M: int = typer.Argument(..., min=1), K: int = typer.Argument(..., min=1),
             N: int = typer.Argument(..., min=1), word_bytes: int = WordOpt,
             as_json: bool = JsonOpt, csv: Path | None = CsvOpt,
             artifact_csv: Path | None = ArtCsvOpt, plot: Path | None = PlotOpt,
             at: float | None = AtOpt, imperfect: bool = ImperfectOpt) -> None:
    """Bound of C[M,N] = A[M,K]·B[K,N].

    Examples:

        opatlas bound gemm 4096 4096 4096

        opatlas bound gemm 16384 1024 1024 --json --plot fig1.png

        opatlas bound gemm 4096 4096 4096 --at 1048576
    """
    from opatlas.bounds import gemm
    _emit(gemm(M, K, N, word_bytes), as_json, csv, artifact_csv, plot, at, imperfect)


@app.command("gbmm")
def gbmm_cmd(M: int = typer.Argument(..., min=1), K: int = typer.Argument(..., min=1),
             N: int = typer.Argument(..., min=1),
             heads: int = typer.Option(1, "--heads", "-H", min=1),
             groups: int = typer.Option(1, "--groups", "-G", min=1),
             word_bytes: int = WordOpt, as_json: bool = JsonOpt, csv: Path | None = CsvOpt,
             artifact_csv: Path | None = ArtCsvOpt, plot: Path | None = PlotOpt,
             at: float | None = AtOpt, imperfect: bool = ImperfectOpt) -> None:
    """Bound of the artifact's grouped BMM: Inputs[H,M,K], Weights[G,K,N], Outputs[H,M,N].

    Example:

        opatlas bound gbmm 4096 128 4096 --heads 32 --groups 4
    """
    from opatlas.bounds import gbmm
    _emit(gbmm(M, K, N, heads, groups, word_bytes), as_json, csv, artifact_csv, plot, at,
          imperfect)


@app.command("conv")
def conv_cmd(name: str | None = typer.Argument(None, help="Artifact name R_S_P_Q_C_K_N_Ws_Hs_Wd_Hd "
                                                          "or Conv(R=..,...)"),
             r: int = typer.Option(1, "--r"), s: int = typer.Option(1, "--s"),
             p: int = typer.Option(1, "--p"), q: int = typer.Option(1, "--q"),
             c: int = typer.Option(1, "--c"), k: int = typer.Option(1, "--k"),
             n: int = typer.Option(1, "--n"), wstride: int = typer.Option(1, "--wstride"),
             hstride: int = typer.Option(1, "--hstride"),
             wdilation: int = typer.Option(1, "--wdilation"),
             hdilation: int = typer.Option(1, "--hdilation"), word_bytes: int = WordOpt,
             as_json: bool = JsonOpt, csv: Path | None = CsvOpt,
             artifact_csv: Path | None = ArtCsvOpt, plot: Path | None = PlotOpt,
             at: float | None = AtOpt, imperfect: bool = ImperfectOpt) -> None:
    """Bound of a convolution (Timeloop cnn-layer, sliding-window halo reuse).

    Examples:

        opatlas bound conv 3_3_16_16_64_64_1_1_1_1_1

        opatlas bound conv --r 3 --s 3 --p 16 --q 16 --c 64 --k 64 --wstride 2 --hstride 2
    """
    from opatlas.bounds import conv
    from opatlas.bounds.einsum import parse_problem
    try:
        e = parse_problem(name, word_bytes) if name else conv(
            r, s, p, q, c, k, n, wstride, hstride, wdilation, hdilation, word_bytes)
    except (ValueError, TypeError) as exc:
        raise OpatlasError(f"conv {name or ''}: {exc}") from None
    _emit(e, as_json, csv, artifact_csv, plot, at, imperfect)


@app.command("einsum")
def einsum_cmd(spec: str = typer.Argument(..., help='Index string, e.g. "mk,kn->mn".'),
               dims: list[str] = typer.Option(..., "--dims", help="Sizes: m=64,k=32 (repeatable)."),
               word_bytes: int = WordOpt, as_json: bool = JsonOpt, csv: Path | None = CsvOpt,
               artifact_csv: Path | None = ArtCsvOpt, plot: Path | None = PlotOpt,
               at: float | None = AtOpt, imperfect: bool = ImperfectOpt) -> None:
    """Bound of a general Einsum; the last operand before '->' is the output's partner.

    Example:

        opatlas bound einsum "bmk,bkn->bmn" --dims b=8,m=512,k=64,n=512
    """
    from opatlas.bounds import from_index_string
    sizes: dict[str, int] = {}
    try:
        for chunk in ",".join(dims).split(","):
            if chunk.strip():
                key, _, val = chunk.partition("=")
                sizes[key.strip()] = int(val)
        e = from_index_string(spec, sizes, word_bytes)
    except ValueError as exc:
        raise OpatlasError(f"einsum {spec!r} --dims {','.join(dims)}: {exc}") from None
    _emit(e, as_json, csv, artifact_csv, plot, at, imperfect)


@app.command("fusion")
def fusion_cmd(layer: list[str] = typer.Option(..., "--layer", help="M,K,N of each GEMM in order."),
               heads: int = typer.Option(1, "--heads", min=1),
               plot: Path | None = PlotOpt, as_json: bool = JsonOpt) -> None:
    """Unfused vs untiled-fused vs tiled-fused (FFMT) bounds of a GEMM chain.

    Example (a 4096-token FFN, 1024 -> 4096 -> 1024):

        opatlas bound fusion --layer 4096,1024,4096 --layer 4096,4096,1024 --plot ffn.png
    """
    from opatlas.bounds import fusion as fu

    try:
        layers = [fu.GemmLayer(*map(int, spec.split(","))) for spec in layer]
        curves = [fu.unfused(layers, heads), fu.untiled_fusion(layers, heads),
                  fu.tiled_fusion(layers, heads)]
    except (ValueError, TypeError) as exc:
        raise OpatlasError(f"--layer {layer}: {exc}") from None
    mins = {"Algo min w/o fusion": heads * fu.algo_min_unfused(layers),
            "Algo min w/ fusion": heads * fu.algo_min_fused(layers)}
    if plot is not None:
        from opatlas.bounds.plots import plot_curves

        plot_curves(curves, plot, mins=mins)
    if as_json:
        typer.echo(json.dumps({**{k.replace(" ", "_").replace("/", ""): v for k, v in mins.items()},
                               "curves": {c.label: [{"buffer": int(b), "accesses": int(a)} for b, a
                                                    in zip(c.buffer, c.accesses, strict=True)]
                                          for c in curves}}))
        return
    for c in curves:
        typer.echo(f"{c.label:<22} min {int(c.accesses[-1]):>15,} words from buffer "
                   f"{int(c.buffer[-1]):,}")
    for k, v in mins.items():
        typer.echo(f"{k:<22} {v:>19,}")


@app.command("figures")
def figures_cmd(outdir: Path = typer.Argument(..., help="Folder for the figures and data.")) -> None:
    """Every single-Einsum figure of the artifact (Fig. 1, 10, 11, 12, 13, 14, 24a), with data.

    Example:

        opatlas bound figures figs/
    """
    from opatlas.bounds.figures import make_figures

    for path in make_figures(outdir):
        typer.echo(str(path))
