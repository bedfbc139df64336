"""``opatlas bound``: data-movement bounds of single Einsums and chains."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand

from opatlas.cli.common import checked_plot, checked_table, one_to_stdout, options_given
from opatlas.errors import OpatlasError

if TYPE_CHECKING:
    from opatlas.bounds import Einsum, Frontier

app = typer.Typer(help="Orojenesis data-movement bounds: minimum backing-store traffic for "
                       "every on-chip buffer size.", no_args_is_help=True)


def _artifact_csv_path(value: Path | None) -> Path | None:
    """``--artifact-csv``: the artifact's header-less CSV, so a .csv or .csv.gz name (or ``-``
    for standard output); Parquet needs the tidy table's column names (``--csv``)."""
    if value is None or str(value) == "-":
        return value
    if value.is_dir():
        raise typer.BadParameter(f"{value} is a folder; give a file name such as "
                                 f"{value / 'orojenesis.csv'}")
    if not value.name.lower().endswith((".csv", ".csv.gz")):
        raise typer.BadParameter(
            f"{value}: the artifact's orojenesis.csv is header-less CSV, so give a .csv or "
            f".csv.gz name (--csv {value.name} writes the tidy frontier"
            + (" as Parquet)" if value.name.lower().endswith(".parquet") else ")"))
    _check_parent(value)
    return value


def _check_parent(path: Path) -> None:
    """A path under a file (``notes.txt/fig.png``) cannot be made: say which file blocks it."""
    from opatlas.atomic import blocking_file

    if (blocker := blocking_file(path)) is not None:
        raise typer.BadParameter(f"{path}: {blocker} is a file, not a folder")


JsonOpt = typer.Option(False, "--json", help="Print the frontier as JSON.")
CsvOpt = typer.Option(None, "--csv", callback=checked_table,
                      help="Write the tidy frontier (.csv, .csv.gz or .parquet; - for "
                           "standard output).")
ArtCsvOpt = typer.Option(None, "--artifact-csv", callback=_artifact_csv_path,
                         help="Write the artifact's orojenesis.csv (header-less; .csv or "
                              ".csv.gz; - for standard output).")
PlotOpt = typer.Option(None, "--plot", callback=checked_plot,
                       help="Write the accesses-vs-buffer plot (.png/.pdf).")


def _checked_at(value: float | None) -> float | None:
    """``--at``: a buffer size is a finite number of words, at least 1."""
    if value is not None and not (math.isfinite(value) and value >= 1):
        raise typer.BadParameter(f"{value} is not a buffer size; give a number of words >= 1")
    return value


AtOpt = typer.Option(None, "--at", callback=_checked_at,
                     help="Print the bound at this buffer size (words).")
WordOpt = typer.Option(1, "--word-bytes", min=1, help="Bytes per word (1 as the artifact).")
ImperfectOpt = typer.Option(False, "--imperfect",
                            help="Also allow ceil (imperfect) tiles, beyond the artifact; the "
                                 "buffer holds whole tiles, and a rank's last, partial tile "
                                 "moves only the elements that exist.")


MaxMappingsOpt = typer.Option(
    None, "--max-mappings", min=1,
    help="Refuse a search over more mappings (tilings x loop orders) than this, counted before "
         "it starts; default 500,000,000 (a minute or two). Raise it to run a bigger one.")


def _wrote(path: Path) -> None:
    """Say where a figure went, on stderr: ``--json`` keeps standard output to itself."""
    typer.echo(f"wrote {path}", err=True)


def _write_table(frame: Any, path: Path) -> None:
    """``--csv``: the table to its file, or as CSV to standard output for ``-``."""
    from opatlas.tables import write_table

    write_table(frame, path, "--csv")


def _one_stdout(outputs: dict[str, bool]) -> None:
    """A table sent to standard output (``--csv -``) must be the only thing printed there;
    ``outputs``: each output's option -> whether it prints (results, ``-`` tables)."""
    if any(used for opt, used in outputs.items() if opt.endswith(" -")):
        one_to_stdout(outputs)


def _emit(e: Einsum, as_json: bool, csv: Path | None, artifact_csv: Path | None,
          plot: Path | None, at: float | None, imperfect: bool,
          max_mappings: int | None = None) -> None:
    to_stdout = {"--csv -": str(csv) == "-", "--artifact-csv -": str(artifact_csv) == "-"}
    _one_stdout({**to_stdout, "--json": as_json, "--at": at is not None})
    f = _searched(e, imperfect, max_mappings)
    if csv is not None:
        _write_table(f.to_frame(), csv)
    if artifact_csv is not None:
        from opatlas.bounds.figures import write_artifact_csv

        write_artifact_csv(f, artifact_csv, "--artifact-csv")
    if plot is not None:
        from opatlas.bounds.plots import plot_frontiers

        wb = e.word_bytes  # the plot is in bytes, as its axes say
        # drawn as the step function lookup() answers, not joined by slopes under it
        _wrote(plot_frontiers([f], plot, plot_min=True, y_end=float(f.buffer[-1]) * 10 * wb,
                              coefficient=wb, steps=True))
    if any(to_stdout.values()):
        return  # the table on standard output is the answer
    if at is not None:
        _print_at(f, at, as_json)
        return
    if as_json:
        typer.echo(json.dumps(f.to_json()))
        return
    _print(f)


def _searched(e: Einsum, imperfect: bool, max_mappings: int | None) -> Frontier:
    """The frontier of ``e``, refused up front when its search covers more than
    ``max_mappings`` mappings (the default when None), with progress on stderr when it runs
    for more than a moment."""
    from opatlas.bounds.frontier import DEFAULT_MAX_MAPPINGS, TooManyMappings, frontier

    limit = DEFAULT_MAX_MAPPINGS if max_mappings is None else max_mappings
    try:
        with _SearchProgress(e.name) as progress:
            return frontier(e, imperfect=imperfect, max_mappings=limit, progress=progress)
    except TooManyMappings as exc:
        raise OpatlasError(
            f"{e.name}: the exact search covers {exc.mappings:,} mappings ({exc.tilings:,} "
            f"tilings x their loop orders), above the limit of {limit:,}; it may run long: "
            f"give --max-mappings {exc.mappings} to run it anyway, or sizes with fewer "
            f"divisors" + ("" if not imperfect else " (or leave out --imperfect)")) from None


class _SearchProgress:
    """``progress(done, total)`` for :func:`~opatlas.bounds.frontier.frontier`: nothing until
    the search has run ``DELAY`` seconds, then a bar on a terminal's stderr, else a line every
    tenth of the tilings (and every 30 s); never on stdout, which may hold --json or --csv -."""

    DELAY = 2.0

    def __init__(self, name: str) -> None:
        import time

        self.name, self.start, self.bar = name, time.monotonic(), None

    def __enter__(self) -> _SearchProgress:
        return self

    def __call__(self, done: int, total: int) -> None:
        import time

        if self.bar is None:
            if time.monotonic() - self.start < self.DELAY:
                return
            from opatlas.run.progress import Progress

            self.bar = Progress(total, label=f"bound {self.name}", unit="tilings",
                                log_every=max(1, total // 10)).__enter__()
            self.bar.t0 = self.start  # the rate counts the work done before the bar showed
        self.bar.advance("searched", done - self.bar.done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


AT_UNITS = {"buffer": "words", "accesses": "words", "buffer_bytes": "bytes",
            "accesses_bytes": "bytes", "oi": "op/B"}


def _at_document(buffer: float, accesses: Any, word_bytes: int, **more: Any) -> dict[str, Any]:
    """The ``--at B --json`` document: ``accesses`` is one bound (gemm and the other single
    Einsums) or a bound by scheme (fusion); None where B is below the smallest buffer.
    Buffer and accesses in words, then in bytes, and ``units`` naming the unit of each field
    (of each scheme's value, for fusion)."""
    def in_bytes(value: int | None) -> int | None:
        return None if value is None else value * word_bytes

    doc = {"buffer": buffer, "accesses": accesses, **more, "word_bytes": word_bytes,
           "buffer_bytes": buffer * word_bytes,
           "accesses_bytes": ({k: in_bytes(v) for k, v in accesses.items()}
                              if isinstance(accesses, dict) else in_bytes(accesses))}
    doc["units"] = {k: unit for k, unit in AT_UNITS.items() if k in doc}
    return doc


def _print_at(f: Frontier, at: float, as_json: bool) -> None:
    """``--at B``: the bound with B words on chip; the JSON says the word size and units."""
    value, wb = f.lookup(at), f.einsum.word_bytes
    buffer = int(at) if float(at).is_integer() else at
    if as_json:
        oi = None if value is None else float(f.oi(value))
        typer.echo(json.dumps(_at_document(buffer, value, wb, oi=oi)))
        return
    typer.echo(f"at {buffer:,} words: " + ("below the smallest mapping's buffer"
                                           if value is None else
                                           f"{value:,} accesses (words of {wb} B)"))


def _print(f: Frontier) -> None:
    """The frontier as a rich table. Every data string is escaped: rich would take a mapping
    such as ``DRAM[b8 m256 ...]`` for a markup tag and drop it."""
    from rich.markup import escape
    from rich.table import Table

    from opatlas.console import make_console, print_wide

    table = Table("buffer (words)", "accesses (words)", "OI (op/B)", "mapping",
                  title=escape(f"{f.einsum.name}: {len(f.buffer)} frontier points of "
                               f"{f.tilings} tilings / {f.mapspace_size} mappings"
                               + (" [imperfect tiling]" if f.imperfect else "")))
    for b, a, o, m in zip(f.buffer, f.accesses, f.oi(), f.to_frame()["mapping"], strict=True):
        table.add_row(f"{b:,}", f"{a:,}", f"{o:.2f}", escape(str(m)))
    print_wide(table)
    console = make_console()
    console.print(f"algo min {f.algo_min:,}  algo max {f.algo_max:,}  maximal effectual "
                  f"buffer {f.max_effectual_buffer:,} ({100 * f.max_effectual_ratio:.2f}% of "
                  f"the operands)")


_NEGATIVE = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")


class _SizesCommand(TyperCommand):
    """A command of sizes given as arguments (``gemm 64 -64 64``): a negative one is said as a
    bad size, naming it, where click would take it for an unknown option ``-6``. A negative
    value of an option (``--seed -1``) is left to the option's own check."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        valued = {o for p in self.params if p.param_type_name == "option"
                  and not getattr(p, "is_flag", False) for o in [*p.opts, *p.secondary_opts]}
        position = 0  # of the argument among the positional ones
        for i, a in enumerate(args):
            if a == "--":
                break
            if i and args[i - 1] in valued:
                continue
            if _NEGATIVE.fullmatch(a):
                name = _size_name(ctx.info_name, args, position,
                                  [p for p in self.params if p.param_type_name == "argument"])
                raise OpatlasError(f"bound {ctx.info_name}: sizes are whole numbers >= 1, not "
                                   f"{a!r} ({name})")
            if not a.startswith("-"):
                position += 1
        return super().parse_args(ctx, args)


def _size_name(command: str | None, args: list[str], position: int, arguments: list[Any]
               ) -> str:
    """The name of the ``position``-th positional argument of ``bound COMMAND``: its own
    (gemm's M, K, N), or the rank of a list of sizes (accel's after its architecture, in
    --problem's kind's order; conv's R S P Q C K ...)."""
    if position < len(arguments) and all(a.nargs == 1 for a in arguments[:position + 1]):
        return str(arguments[position].name)
    order = {"conv": _ACCEL_SIZES["conv"][0]}.get(command or "", "")
    if command == "accel":
        kind = _problem_kind(args)
        order = _ACCEL_SIZES[kind][0] if kind in _ACCEL_SIZES else ""
        position -= 1  # the architecture comes first
    names = order.replace("[", "").replace("]", "").split()
    return names[position] if 0 <= position < len(names) else f"size {position + 1}"


def _problem_kind(args: list[str]) -> str:
    """The kind ``--problem`` names in ``args`` (gemm, its default, when not given)."""
    for i, a in enumerate(args):
        value = a.partition("=")[2] if a.startswith("--problem=") else (
            args[i + 1] if a == "--problem" and i + 1 < len(args) else None)
        if value is not None:
            return (value.split() or [""])[0].lower()
    return "gemm"


@app.command("gemm", cls=_SizesCommand)
def gemm_cmd(M: int = typer.Argument(..., min=1, help="Rows of A and C."),
             K: int = typer.Argument(..., min=1, help="Columns of A, rows of B."),
             N: int = typer.Argument(..., min=1, help="Columns of B and C."), word_bytes: int = WordOpt,
             as_json: bool = JsonOpt, csv: Path | None = CsvOpt,
             artifact_csv: Path | None = ArtCsvOpt, plot: Path | None = PlotOpt,
             at: float | None = AtOpt, imperfect: bool = ImperfectOpt,
             max_mappings: int | None = MaxMappingsOpt) -> None:
    """Bound of C[M,N] = A[M,K]·B[K,N].

    Examples:

        opatlas bound gemm 4096 4096 4096

        opatlas bound gemm 16384 1024 1024 --json --plot fig1.png

        opatlas bound gemm 4096 4096 4096 --at 1048576
    """
    from opatlas.bounds import gemm

    e = _made(f"gemm {M} {K} {N}", gemm, M, K, N, word_bytes)
    _emit(e, as_json, csv, artifact_csv, plot, at, imperfect, max_mappings)


def _grouped_bmm(M: int, K: int, N: int, H: int = 1, G: int = 1, word_bytes: int = 1, *,
                 artifact: bool = False, other: str = "--artifact-template") -> Einsum:
    """GQA's grouped BMM (H/G heads per group share that group's weights: H·M·K·N MACs), or
    with ``artifact`` the artifact's template (every head against every group: H·G·M·K·N);
    either way H must be a multiple of G. Which one runs is said when G > 1 (they differ),
    with ``other``, how to ask for the template."""
    import warnings

    from opatlas.bounds.einsum import gbmm, gqa_bmm

    if H % G:
        raise ValueError(f"{H} heads do not split evenly into {G} groups")
    e = gbmm(M, K, N, H, G, word_bytes) if artifact else gqa_bmm(M, K, N, H, G, word_bytes)
    if G > 1:
        warnings.warn(_GBMM_ARTIFACT_NOTE if artifact else _GBMM_GQA_NOTE.format(other=other),
                      stacklevel=2)
    return e


_GBMM_GQA_NOTE = ("gbmm: bounding GQA's grouped BMM, H/G heads per group sharing that group's "
                  "weights (H·M·K·N MACs); {other} bounds the artifact's template, "
                  "whose loops run every head against every group (H·G·M·K·N)")
_GBMM_ARTIFACT_NOTE = ("gbmm: bounding the artifact's template, Inputs[H,M,K]·Weights[G,K,N] "
                       "with loops over H·G·M·K·N (every head against every group), not GQA's "
                       "grouped BMM; OI over the true H·M·K·N MACs")


def _made(label: str, make: Any, *args: Any, **kwargs: Any) -> Einsum:
    """``make(*args)``, a problem it refuses (too large to count, ...) one error line."""
    try:
        return make(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        raise OpatlasError(f"{label}: {exc}") from None


@app.command("gbmm", cls=_SizesCommand)
def gbmm_cmd(M: int = typer.Argument(..., min=1, help="Rows of each head's input."),
             K: int = typer.Argument(..., min=1, help="The contracted size."),
             N: int = typer.Argument(..., min=1, help="Columns of each group's weights."),
             heads: int = typer.Option(1, "--heads", "-H", min=1, help="H: input heads."),
             groups: int = typer.Option(1, "--groups", "-G", min=1,
                                        help="G: weight groups; H must be a multiple."),
             artifact_template: bool = typer.Option(
                 False, "--artifact-template",
                 help="Bound the artifact's template instead (Inputs[H,M,K], Weights[G,K,N], "
                      "loops over H·G·M·K·N: every head against every group), as its "
                      "Fig. 13/14 and bound figures do."),
             word_bytes: int = WordOpt, as_json: bool = JsonOpt, csv: Path | None = CsvOpt,
             artifact_csv: Path | None = ArtCsvOpt, plot: Path | None = PlotOpt,
             at: float | None = AtOpt, imperfect: bool = ImperfectOpt,
             max_mappings: int | None = MaxMappingsOpt) -> None:
    """Bound of the grouped BMM of grouped-query attention: H heads in G groups, the H/G
    heads of a group sharing its weights (H·M·K·N multiply-accumulates).

    Dims G, Hg = H/G, M, K, N: Inputs[G,Hg,M,K], Weights[G,K,N], Outputs[G,Hg,M,N]; OI as a
    GEMM's, 2·MACs − |O| (first reads elided). H must be a multiple of G. With
    --artifact-template, the artifact's template (gbmm_M_K_N_H_G), whose loops run H·G·M·K·N;
    for G > 1 its least traffic is above GQA's (stderr says which one ran).

    Example:

        opatlas bound gbmm 4096 128 4096 --heads 32 --groups 4
    """
    e = _made(f"gbmm {M} {K} {N}", _grouped_bmm, M, K, N, heads, groups, word_bytes,
              artifact=artifact_template)
    _emit(e, as_json, csv, artifact_csv, plot, at, imperfect, max_mappings)


_CONV_OPTIONS = ("r", "s", "p", "q", "c", "k", "n", "wstride", "hstride", "wdilation",
                 "hdilation")


_CONV_HELP = {"r": "Filter width (R).", "s": "Filter height (S).", "p": "Output width (P).",
              "q": "Output height (Q).", "c": "Input channels (C).", "k": "Output channels (K).",
              "n": "Batch (N).", "wstride": "Horizontal stride.", "hstride": "Vertical stride.",
              "wdilation": "Horizontal dilation.", "hdilation": "Vertical dilation."}


def _conv_opt(name: str) -> int:
    return typer.Option(1, f"--{name}", min=1, help=_CONV_HELP[name])


def _conv_options_given(ctx: typer.Context) -> list[str]:
    """The --r ... --hdilation options the user set (they would be ignored beside a NAME)."""
    return options_given(ctx, _CONV_OPTIONS)


@app.command("conv", cls=_SizesCommand)
def conv_cmd(ctx: typer.Context,
             spec: list[str] = typer.Argument(
                 None, metavar="[SIZES|NAME]",
                 help="R S P Q C K [N Ws Hs Wd Hd] (1 for each left out, as bound accel "
                      "--problem conv), or an artifact name R_S_P_Q_C_K_N_Ws_Hs_Wd_Hd "
                      "(all 11 fields) or Conv(R=..,...)"),
             r: int = _conv_opt("r"), s: int = _conv_opt("s"), p: int = _conv_opt("p"),
             q: int = _conv_opt("q"), c: int = _conv_opt("c"), k: int = _conv_opt("k"),
             n: int = _conv_opt("n"), wstride: int = _conv_opt("wstride"),
             hstride: int = _conv_opt("hstride"), wdilation: int = _conv_opt("wdilation"),
             hdilation: int = _conv_opt("hdilation"), word_bytes: int = WordOpt,
             as_json: bool = JsonOpt, csv: Path | None = CsvOpt,
             artifact_csv: Path | None = ArtCsvOpt, plot: Path | None = PlotOpt,
             at: float | None = AtOpt, imperfect: bool = ImperfectOpt,
             max_mappings: int | None = MaxMappingsOpt) -> None:
    """Bound of a convolution (Timeloop cnn-layer, sliding-window halo reuse).

    Examples:

        opatlas bound conv 3 3 16 16 64 64

        opatlas bound conv 3_3_16_16_64_64_1_1_1_1_1

        opatlas bound conv --r 3 --s 3 --p 16 --q 16 --c 64 --k 64 --wstride 2 --hstride 2
    """
    from opatlas.bounds import conv
    from opatlas.bounds.einsum import parse_conv

    spec = spec or []
    given = _conv_options_given(ctx)
    if spec and given:
        raise OpatlasError(f"conv {' '.join(spec)!r}: give the conv as sizes, a NAME or "
                           f"options, not both ({', '.join(given)} would be ignored)")
    if not spec and not given:
        raise OpatlasError("conv: no convolution given; give its sizes (e.g. 3 3 16 16 64 64), "
                           "name it (3_3_16_16_64_64_1_1_1_1_1) or use the options (--r 3 "
                           "--s 3 --p 16 --q 16 --c 64 --k 64)")
    if spec and all(x.isdigit() for x in spec):
        e = _conv_from_sizes("conv", [int(x) for x in spec], word_bytes)
        _emit(e, as_json, csv, artifact_csv, plot, at, imperfect, max_mappings)
        return
    if len(spec) > 1:
        raise OpatlasError(f"conv {' '.join(spec)!r}: expected sizes (whole numbers: R S P Q C "
                           f"K ...) or one name, e.g. 3_3_16_16_64_64_1_1_1_1_1")
    try:
        e = parse_conv(spec[0], word_bytes) if spec else conv(
            r, s, p, q, c, k, n, wstride, hstride, wdilation, hdilation, word_bytes)
    except (ValueError, TypeError) as exc:
        raise OpatlasError(str(exc) if spec else f"conv: {exc}") from None
    _emit(e, as_json, csv, artifact_csv, plot, at, imperfect, max_mappings)


def _conv_from_sizes(label: str, dims: list[int], word_bytes: int = 1) -> Einsum:
    """A convolution from 1 to 11 sizes in the artifact's order (R S P Q C K N Ws Hs Wd Hd),
    1 for each one left out, which is said on stderr."""
    import warnings

    from opatlas.bounds import conv
    from opatlas.bounds.einsum import CONV_FIELDS

    if not 1 <= len(dims) <= len(CONV_FIELDS):
        raise OpatlasError(f"{label} {' '.join(map(str, dims))}: a convolution takes 1 to "
                           f"{len(CONV_FIELDS)} sizes ({' '.join(CONV_FIELDS)}), got {len(dims)}")
    try:
        e = conv(*dims, word_bytes=word_bytes)
    except (ValueError, TypeError) as exc:
        raise OpatlasError(f"{label} {' '.join(map(str, dims))}: {exc}") from None
    if len(dims) < CONV_FIELDS.index("N"):  # the optional N and strides: 1, as the help says
        warnings.warn(f"{label} {' '.join(map(str, dims))}: "
                      f"{', '.join(CONV_FIELDS[len(dims):])} not given; using 1 for each",
                      stacklevel=2)
    return e


def _parse_dims(dims: list[str]) -> dict[str, int]:
    """``--dims b=8,m=512`` (repeatable) as sizes; each name once, each size an integer."""
    sizes: dict[str, int] = {}
    for chunk in filter(None, (x.strip() for x in ",".join(dims).split(","))):
        key, eq, val = (x.strip() for x in chunk.partition("="))
        try:
            size = int(val)
        except ValueError:
            size = None
        if not eq or not key or size is None:
            raise OpatlasError(f"--dims {chunk!r}: expected NAME=SIZE with an integer size, "
                               "e.g. m=512")
        if key in sizes:
            raise OpatlasError(f"--dims: {key} given twice")
        sizes[key] = size
    return sizes


class _ExpressionCommand(TyperCommand):
    """``bound einsum``: an expression that starts with '-' (``"->mn"``) is the EXPRESSION,
    where click would stop at it as an unknown option. It is moved behind a ``--``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        valued = {o for p in self.params if p.param_type_name == "option"
                  and not getattr(p, "is_flag", False) for o in p.opts}
        if "--" not in args:
            for i, a in enumerate(args):
                if a.startswith("-") and "->" in a and (i == 0 or args[i - 1] not in valued):
                    args = [*args[:i], *args[i + 1:], "--", a]
                    break
        return super().parse_args(ctx, args)


@app.command("einsum", cls=_ExpressionCommand)
def einsum_cmd(spec: str = typer.Argument(..., help='Index string, e.g. "mk,kn->mn".'),
               dims: list[str] = typer.Option(..., "--dims", help="Sizes: m=64,k=32 (repeatable)."),
               word_bytes: int = WordOpt, as_json: bool = JsonOpt, csv: Path | None = CsvOpt,
               artifact_csv: Path | None = ArtCsvOpt, plot: Path | None = PlotOpt,
               at: float | None = AtOpt, imperfect: bool = ImperfectOpt,
               max_mappings: int | None = MaxMappingsOpt) -> None:
    """Bound of a general Einsum; the last operand before '->' is the output's partner.

    Example:

        opatlas bound einsum "bmk,bkn->bmn" --dims b=8,m=512,k=64,n=512

    An expression may start with '-' (it is not taken for an option).
    """
    from opatlas.bounds import from_index_string

    sizes = _parse_dims(dims)
    try:
        e = from_index_string(spec, sizes, word_bytes)
    except ValueError as exc:
        raise OpatlasError(f"{exc} (--dims {','.join(dims)})") from None
    _emit(e, as_json, csv, artifact_csv, plot, at, imperfect, max_mappings)


def _mkn(spec: str) -> tuple[int, int, int]:
    """``M,K,N`` of one GEMM of a chain: three whole numbers >= 1."""
    try:
        m, k, n = (int(x) for x in spec.split(","))
    except ValueError:
        raise ValueError(f"{spec!r} is not M,K,N (three whole numbers)") from None
    if min(m, k, n) < 1:
        raise ValueError(f"{spec!r}: every size must be >= 1")
    return m, k, n


@app.command("fusion")
def fusion_cmd(layer: list[str] = typer.Option(..., "--layer", help="M,K,N of each GEMM in order."),
               heads: int = typer.Option(1, "--heads", min=1,
                                         help="Independent copies of the chain (heads)."),
               word_bytes: int = WordOpt, plot: Path | None = PlotOpt, as_json: bool = JsonOpt,
               csv: Path | None = typer.Option(
                   None, "--csv", callback=checked_table,
                   help="Write every scheme's curve (.csv, .csv.gz or .parquet; - for standard "
                        "output)."),
               at: float | None = AtOpt) -> None:
    """Unfused vs untiled-fused vs tiled-fused (FFMT) bounds of a GEMM chain.

    Each scheme's curve is its own bound, as the artifact draws them: at a buffer too small
    for a scheme it can exceed the unfused curve. "best of the three" is the bound when the
    chain may run whichever scheme is best at each buffer size. Buffers and accesses are in
    words (--word-bytes each), as gemm's; the plot is in bytes.

    Example (a 4096-token FFN, 1024 -> 4096 -> 1024):

        opatlas bound fusion --layer 4096,1024,4096 --layer 4096,4096,1024 --plot ffn.png
    """
    from opatlas.bounds import fusion as fu

    _one_stdout({"--csv -": str(csv) == "-", "--json": as_json, "--at": at is not None})
    try:
        layers = [fu.GemmLayer(*_mkn(spec)) for spec in layer]
        curves = [fu.unfused(layers, heads), fu.untiled_fusion(layers, heads),
                  fu.tiled_fusion(layers, heads)]
        curves.append(fu.envelope(curves, "best of the three"))
    except (ValueError, TypeError) as exc:
        raise OpatlasError(f"--layer {layer}: {exc}") from None
    mins = {"Algo min w/o fusion": heads * fu.algo_min_unfused(layers),
            "Algo min w/ fusion": heads * fu.algo_min_fused(layers)}
    if csv is not None:
        _write_table(fu.curves_frame(curves, word_bytes), csv)
    if plot is not None:
        from opatlas.bounds.plots import plot_curves

        wb = word_bytes  # the plot's axes are in bytes
        _wrote(plot_curves([_in_bytes(c, wb) for c in curves[:-1]], plot,
                           mins={k: v * wb for k, v in mins.items()},
                           best=_in_bytes(curves[-1], wb)))
    if str(csv) == "-":
        return  # the table on standard output is the answer
    if at is not None:
        _print_fusion_at(curves, at, word_bytes, as_json)
    elif as_json:
        typer.echo(json.dumps({"word_bytes": word_bytes,
                               **{k.replace(" ", "_").replace("/", ""): v
                                  for k, v in mins.items()},
                               "curves": {c.label: [{"buffer": int(b), "accesses": int(a)} for b, a
                                                    in zip(c.buffer, c.accesses, strict=True)]
                                          for c in curves}}))
    else:
        _print_fusion(curves, mins, word_bytes)


def _in_bytes(c: Any, word_bytes: int) -> Any:
    """A curve in words as the same curve in bytes (the plot's unit)."""
    from opatlas.bounds.frontier import Curve

    return Curve(c.buffer * word_bytes, c.accesses * word_bytes, c.label)


def _print_fusion(curves: list[Any], mins: dict[str, int], word_bytes: int) -> None:
    for c in curves:
        typer.echo(f"{c.label:<22} min {int(c.accesses[-1]):>15,} words from buffer "
                   f"{int(c.buffer[-1]):,} words")
    for k, v in mins.items():
        typer.echo(f"{k:<22} {v:>19,} words")
    typer.echo(f"(words of {word_bytes} B)")


def _print_fusion_at(curves: list[Any], at: float, word_bytes: int, as_json: bool) -> None:
    """``bound fusion --at B``: every scheme's bound with B words on chip."""
    buffer = int(at) if float(at).is_integer() else at
    values = {c.label: c.lookup(at) for c in curves}
    if as_json:
        typer.echo(json.dumps(_at_document(buffer, values, word_bytes)))
        return
    size = f"{buffer:,}"
    for label, value in values.items():
        typer.echo(f"{label:<22} at {size} words: "
                   + ("below this scheme's smallest buffer" if value is None
                      else f"{value:,} accesses (words of {word_bytes} B)"))


@app.command("figures")
def figures_cmd(outdir: Path = typer.Argument(..., help="Folder for the figures and data.")) -> None:
    """Every single-Einsum figure of the artifact (Fig. 1, 10, 11, 12, 13, 14, 24a, 24b), with data.

    Fig. 13 and 14 bound the artifact's GBMM template, as it does (bound gbmm
    --artifact-template); the Fig. 14 OI plot draws the notebook's OI, over 2·H·M·K·N.
    After the paths, Fig. 24a's GPU points beside the bound at each L2 size (measured over
    bound; also in fig24a_vs_bound.csv).

    Example:

        opatlas bound figures figs/
    """
    from opatlas.atomic import blocking_file
    from opatlas.bounds.figures import fig24a_comparison, fig24a_lines, make_figures

    if outdir.exists() and not outdir.is_dir():
        raise OpatlasError(f"bound figures {outdir}: is a file; give a folder (it is made if "
                           f"missing)")
    if (blocker := blocking_file(outdir)) is not None:
        raise OpatlasError(f"bound figures {outdir}: {blocker} is a file, not a folder")
    for path in make_figures(outdir):
        typer.echo(str(path))
    for line in fig24a_lines(fig24a_comparison()):
        typer.echo(line)


# ``bound accel --problem KIND SIZES``: each kind's sizes, in order, and an example
_ACCEL_SIZES = {"gemm": ("M K N", "64 64 64"), "bmm": ("B M K N", "8 64 64 64"),
                "gbmm": ("M K N [H [G]]", "64 64 64 8 2"),
                "conv": ("R S P Q C K [N Ws Hs Wd Hd]", "3 3 16 16 64 64")}
_ACCEL_PROBLEM_HELP = ("gemm M K N | bmm B M K N | gbmm M K N [H [G]] (GQA's grouped BMM: H "
                       "heads in G groups, H and G 1 when left out) | conv R S P Q C K [N Ws "
                       "Hs Wd Hd] (1 for each left out), the sizes after the architecture or "
                       "quoted inside (--problem 'gemm 64 64 64'), not both; or an artifact "
                       "name with no sizes (gbmm_M_K_N_H_G is the artifact's template).")


def _accel_sizes(problem: str, kind: str, inline: list[str], dims: list[int]) -> list[int]:
    """The sizes of ``--problem 'KIND SIZES'`` or of the arguments after the architecture:
    given in one place only, as whole numbers."""
    if not inline:
        return dims
    if bad := [x for x in inline if not x.isdigit()]:
        raise OpatlasError(f"--problem {problem!r}: sizes are whole numbers, not "
                           f"{', '.join(map(repr, bad))}")
    if dims:
        raise OpatlasError(f"--problem {problem!r} and {' '.join(map(str, dims))}: sizes given "
                           f"twice, {len(inline)} inside --problem and {len(dims)} after the "
                           f"architecture; give {kind}'s {_ACCEL_SIZES[kind][0]} in one place")
    return [int(x) for x in inline]


def _accel_problem(problem: str, dims: list[int]) -> Einsum:
    """``gemm M K N``, ``bmm B M K N``, ``gbmm M K N [H [G]]`` (GQA's grouped BMM), ``conv R S
    P Q C K N ...``, the sizes inline or in ``dims``; or (no dims) any artifact name
    ``parse_problem`` reads."""
    kind, *inline = problem.split() or [""]
    kind = kind.lower()
    if kind in _ACCEL_SIZES:
        dims = _accel_sizes(problem, kind, inline, dims)
        label = f"--problem {kind} {' '.join(map(str, dims))}".rstrip()
        if not dims:
            raise OpatlasError(f"--problem {kind}: give its sizes after the architecture, "
                               f"{_ACCEL_SIZES[kind][0]} (e.g. opatlas bound accel simba "
                               f"--problem {kind} {_ACCEL_SIZES[kind][1]})")
        if kind == "conv":
            return _conv_from_sizes(f"--problem {kind}", dims)
        return _sized_problem(label, kind, dims)
    if dims:
        raise OpatlasError(f"--problem {problem!r}: unknown problem kind for the sizes "
                           f"{' '.join(map(str, dims))} (one of {', '.join(_ACCEL_SIZES)}; an "
                           "artifact name such as 'Conv(P=4096, C=4096, K=4096)' takes none)")
    return _artifact_problem(problem)


def _sized_problem(label: str, kind: str, dims: list[int]) -> Einsum:
    """gemm, bmm or gbmm from its sizes; gbmm's H and G are 1 when left out (said)."""
    import warnings

    from opatlas.bounds import bmm, gemm

    lo, hi = {"gemm": (3, 3), "bmm": (4, 4), "gbmm": (3, 5)}[kind]
    if not lo <= len(dims) <= hi:
        raise OpatlasError(f"{label}: {kind} takes {lo}" + (f" to {hi}" if hi > lo else "")
                           + f" sizes ({_ACCEL_SIZES[kind][0]}), got {len(dims)}")
    if kind == "gbmm":
        e = _made(label, _grouped_bmm, *dims,
                  other=f"--problem gbmm_{'_'.join(map(str, [*dims, 1, 1][:5]))}")
        if len(dims) < 5:
            warnings.warn(f"{label}: {' and '.join('HG'[len(dims) - 3:])} not given; using 1 "
                          f"for each", stacklevel=2)
        return e
    return _made(label, gemm if kind == "gemm" else bmm, *dims)


def _artifact_problem(problem: str) -> Einsum:
    """An artifact name; its grouped BMM is the artifact's template, said when G > 1."""
    import warnings

    from opatlas.bounds.einsum import parse_problem

    try:
        e = parse_problem(problem)
    except (ValueError, TypeError) as exc:
        raise OpatlasError(f"--problem {problem!r}: {exc} (give a kind with sizes, "
                           f"{', '.join(_ACCEL_SIZES)}, or an artifact name such as "
                           f"'Conv(P=4096, C=4096, K=4096)')") from None
    if e.ranks.get("G", 1) > 1 and e.name.startswith("gbmm_"):
        warnings.warn(f"--problem {problem}: {_GBMM_ARTIFACT_NOTE.removeprefix('gbmm: ')}; "
                      f"--problem gbmm {' '.join(str(e.ranks[r]) for r in 'MKNHG')} bounds "
                      f"GQA's", stacklevel=2)
    return e


def _kb_list(text: str) -> list[float]:
    try:
        sizes = [float(x) * 1024 for x in text.split(",")]
    except ValueError:
        raise OpatlasError(f"--buffer-sizes {text!r}: expected KB values separated by commas, "
                           "e.g. 0.125,1,8,64,512") from None
    if not sizes:
        raise OpatlasError(f"--buffer-sizes {text!r}: give at least one size in KB")
    if min(sizes) <= 0 or not all(map(math.isfinite, sizes)):
        raise OpatlasError(f"--buffer-sizes {text!r}: every size must be a positive number of "
                           f"KB")
    return sizes


@app.command("accel", cls=_SizesCommand)
def accel_cmd(arch: str = typer.Argument(..., help="Architecture YAML, or a built-in: simba."),
              dims: list[int] = typer.Argument(
                  None, metavar="SIZES",
                  help="The --problem's sizes in its order: gemm M K N, bmm B M K N, gbmm M K "
                       "N [H [G]] (H, G: 1 when left out), conv R S P Q C K [N Ws Hs Wd Hd]."),
              problem: str = typer.Option("gemm", "--problem", help=_ACCEL_PROBLEM_HELP),
              buffer_sizes: str = typer.Option("0.125,1,8,64,512", "--buffer-sizes",
                                               help="Sizes of --level to sweep, in KB."),
              level: str = typer.Option("GlobalBuffer", "--level",
                                        help="The on-chip level whose size is swept."),
              mappings: int = typer.Option(2000, "--mappings", min=1,
                                           help="Valid distinct mappings per size."),
              seed: int = typer.Option(0, "--seed", min=0,
                                       help="Seed of the random mapper (>= 0)."),
              min_utilization: float = typer.Option(
                  0.0, "--min-utilization", min=0.0, max=1.0,
                  help="Only mappings that keep at least this share of the MACs busy."),
              search_rounds: int = typer.Option(
                  40, "--search-rounds", min=0,
                  help="Rounds of local search from each size's best mappings (0: none)."),
              plot: Path | None = PlotOpt, csv: Path | None = typer.Option(
                  None, "--csv", callback=checked_table,
                  help="Write every mapping (.csv, .csv.gz or .parquet; - for standard "
                       "output)."),
              as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
              strict: bool = typer.Option(False, "--strict",
                                          help="Fail if a size gets fewer valid mappings.")
              ) -> None:
    """Map a problem onto a multi-level spatial accelerator, for each size of one buffer,
    and put every mapping's DRAM accesses beside the Orojenesis bound (Fig. 24b).

    Energy is not modelled; latency is the compute-bound cycle count of the spatial mapping.

    Examples:

        opatlas bound accel simba --problem gemm 4096 4096 4096 --plot fig24b.png

        opatlas bound accel my_arch.yaml --problem gemm 1024 1024 1024 --buffer-sizes 1,64

        opatlas bound accel simba --problem bmm 8 512 64 512      # B M K N

        opatlas bound accel simba --problem gbmm 512 64 512 32 4  # M K N H G (H, G default 1)
    """
    import sys

    from opatlas.bounds.accel_report import sweep_buffer_sizes
    from opatlas.bounds.arch import load_arch
    from opatlas.errors import SpecError

    _one_stdout({"--csv -": str(csv) == "-", "--json": as_json})
    e = _accel_problem(problem, dims or [])
    machine = load_arch(arch)
    try:  # a level the sweep cannot resize is the option's error, before any work
        machine.with_size(level, 1.0)
    except SpecError as exc:
        raise SpecError(exc.detail, file="--level", value=level) from None
    sweep = sweep_buffer_sizes(e, machine, level=level,
                               sizes_bytes=_kb_list(buffer_sizes), mappings=mappings, seed=seed,
                               min_utilization=min_utilization, search_rounds=search_rounds)
    for note in sweep.notes:
        if strict:
            raise OpatlasError(f"{note}; --strict")
        print(f"warning: {note}", file=sys.stderr)
    if csv is not None:
        _write_table(sweep.points, csv)
    if plot is not None:
        from opatlas.bounds.plots import plot_accel_sweep

        _wrote(plot_accel_sweep(sweep.frontier, sweep.points, plot, level=level,
                                coefficient=sweep.einsum.word_bytes,  # the axes are in bytes
                                title=f"{sweep.arch.name}: {e.name}", searched=sweep.searched,
                                xlabel=f"on chip: {level} + the levels above it (B)"
                                if sweep.above else None))
    if str(csv) == "-":
        return  # the mappings on standard output are the answer
    if as_json:
        typer.echo(json.dumps(sweep.to_json(), default=float))
        return
    _print_accel(sweep)


def _print_accel(sweep) -> None:
    """The sweep as rich tables; names and mappings escaped as in ``_print``."""
    from rich.markup import escape
    from rich.table import Table

    from opatlas.console import make_console, print_wide

    best = sweep.best()
    on_chip = ["on chip (B)"] if sweep.above else []  # the bound's capacity, when not the size
    table = Table("size (B)", *on_chip, "maps", "best DRAM", "bound", "gap", "below", "gap@tile",
                  "util", title=escape(f"{sweep.arch.name}: {sweep.einsum.name}, DRAM accesses "
                                       f"in words of {sweep.einsum.word_bytes} B"))
    for r in best.itertuples():
        table.add_row(f"{r.capacity_bytes:,.0f}",
                      *([f"{r.bound_capacity_bytes:,.0f}"] if on_chip else []),
                      f"{r.mappings:,}", f"{r.best_dram_accesses:.4g}",
                      f"{r.bound_at_capacity:.4g}", f"{100 * r.gap_to_bound:+.1f}%",
                      f"{r.below_bound_at_capacity}", f"{100 * r.gap_to_bound_at_tile:+.1f}%",
                      f"{100 * r.best_utilization:.0f}%")
    print_wide(table)
    console = make_console()
    for r in best.itertuples():
        console.print(escape(f"best at {r.capacity_bytes:,.0f} B: {r.best_mapping}"),
                      soft_wrap=True)
    if sweep.searched is not None:
        table = Table("size (B)", "searched best", "gap", "gap@tile", "util",
                      title="after local search from the best sampled mappings")
        for r in best.itertuples():
            table.add_row(f"{r.capacity_bytes:,.0f}", f"{r.searched_dram_accesses:.4g}",
                          f"{100 * r.searched_gap_to_bound:+.1f}%",
                          f"{100 * r.searched_gap_to_bound_at_tile:+.1f}%",
                          f"{100 * r.searched_utilization:.0f}%")
        print_wide(table)
        for r in best.itertuples():
            console.print(escape(f"searched best at {r.capacity_bytes:,.0f} B: "
                                 f"{r.searched_mapping}"), soft_wrap=True)
    console.print(_accel_footer(sweep))


def _accel_footer(sweep) -> str:
    """What the accel table's columns mean; the bound's capacity is said in full when levels
    between the swept one and DRAM also hold data (they count: data held there is reused)."""
    from rich.markup import escape

    level = escape(sweep.level)
    if sweep.above:
        where = (f"size: {level} capacity; on chip: that size + {sum(sweep.above.values()):,.0f}"
                 f" B of {escape(', '.join(sweep.above))}, the on-chip levels between it and "
                 "DRAM (one instance each), which hold data for reuse too; bound: the "
                 "Orojenesis bound at that on-chip capacity; ")
        bypass = "the levels"
    else:
        where = f"size: {level} capacity; bound: the Orojenesis bound at that capacity; "
        bypass = "the level"
    return (where + "gap = best / bound − 1; below: mappings under that bound (possible when "
            f"a tensor bypasses {bypass}); gap@tile: the best mapping against the bound at its "
            "own uniform tile (all loops below DRAM), a floor for every mapping.")
