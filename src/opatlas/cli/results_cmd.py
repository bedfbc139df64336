"""``opatlas results`` and ``opatlas import``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from opatlas.cli.common import StoreOpt
from opatlas.errors import OpatlasError

if TYPE_CHECKING:
    from opatlas.store import Store
    from opatlas.store.db import ParamFilter

import_app = typer.Typer(help="Read results made elsewhere into the store.", no_args_is_help=True)
FORMATS = ("table", "csv", "json", "parquet", "ett")


def results(
    store: Path = StoreOpt,
    fmt: str | None = typer.Option(
        None, "--format", help="table | csv | json | parquet | ett (upstream CSVs, needs --out "
                               "DIR); default: from --out's extension, else table"),
    out: Path | None = typer.Option(
        None, "--out", help="Write to this file instead of stdout: .csv, .json, .parquet or .pq "
                            "(the format follows), .txt or no extension (a text table), or "
                            "'-' (stdout)."),
    op: str | None = typer.Option(None, "--op", help="Only this op."),
    status: str | None = typer.Option(None, "--status", help="Only rows with this status."),
    limit: int = typer.Option(50, "--limit", min=0, help="Rows shown by --format table (0: all)."),
) -> None:
    """Print or export the results table.

    Examples:

        opatlas results

        opatlas results --format csv --out results.csv

        opatlas results --format parquet --out results.parquet --op linear

        opatlas results --format ett --out sampling_data/
    """
    from opatlas.store import Store

    fmt = _format(fmt, out)
    if fmt == "ett":
        if out.exists() and not out.is_dir():
            raise OpatlasError(f"--out {out}: --format ett writes a folder of CSVs, and this is "
                               f"a file")
        from opatlas.store.ett import export_ett

        with Store(store, read_only=True) as st:
            for path in export_ett(st, out):
                typer.echo(str(path))
        return
    from opatlas.store.db import STATUSES

    if status is not None and status not in STATUSES:
        raise OpatlasError(f"--status {status!r}: a result's status is one of "
                           f"{', '.join(STATUSES)}")
    with Store(store, read_only=True) as st:
        op, params = _as_stored(op, st.ops())
        total = st.count_results(op, status, params)
        df = st.results(op=op, status=status, params=params,
                        limit=limit if fmt == "table" and limit else None)
        varying = _varying(st, op, status) if fmt == "table" else []
        if total == 0 and op is not None and op not in (ops := st.ops()):
            typer.echo(f"note: the store has no op {op!r}; it has {', '.join(ops) or 'none'}",
                       err=True)
    if fmt == "table":
        _print_table(df, limit, out, total, varying)
    elif fmt == "csv":
        text = df.to_csv(index=False)
        _emit(text, out)
    elif fmt == "json":
        _emit(df.to_json(orient="records", date_format="iso"), out)
    else:
        from opatlas.atomic import write_output

        write_output(out, lambda tmp: df.to_parquet(tmp, index=False))
        _wrote(f"wrote {len(df)} rows to {out}", out)


def _as_stored(op: str | None, stored: list[str]) -> tuple[str | None, ParamFilter | None]:
    """``--op`` as the store files it: a catalog op and an estimate-train-time name of it
    (``flash_attention``, ``flash_atten``) are one op; an alias that fixes parameters
    (``linear1``: a linear of role qkv) filed under another name keeps only the rows with
    those values. Said when they differ."""
    if op is None or op in stored:
        return op, None
    from opatlas.ops.registry import filed_as, get_op
    from opatlas.store.db import ParamFilter

    same = filed_as(op, stored)
    if len(same) != 1:  # none, or several (linear1..4 are all linear): the names say more
        return op, None
    name, values = same[0]
    rows = f" (its rows with {', '.join(f'{k}={v}' for k, v in values.items())})" \
        if values else ""
    typer.echo(f"note: --op {op}: the store files it as {name!r}{rows}", err=True)
    return name, ParamFilter(values, get_op(op)[0].defaults) if values else None


BY_SUFFIX = {".csv": "csv", ".json": "json", ".parquet": "parquet", ".pq": "parquet"}
TEXT_SUFFIXES = ("", ".txt")  # --out's names for the text table, the format when none is given


def _format(fmt: str | None, out: Path | None) -> str:
    """--format as given, or from --out's extension; a data format must match its file's."""
    implied = BY_SUFFIX.get(out.suffix.lower()) if out is not None else None
    if fmt is None and out is not None and implied is None and \
            out.suffix.lower() not in TEXT_SUFFIXES:
        raise OpatlasError(f"--out {out}: unknown extension {out.suffix!r}; --out takes "
                           f"{', '.join(BY_SUFFIX)} (the format follows), .txt or no "
                           f"extension (a text table), or give --format")
    if fmt is None:
        fmt = implied or "table"
    if fmt not in FORMATS:
        raise OpatlasError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt in ("parquet", "ett") and out is None:
        raise OpatlasError(f"--format {fmt} needs --out {'DIR' if fmt == 'ett' else 'FILE'}")
    if implied is not None and fmt != implied:
        raise OpatlasError(f"--out {out} is a .{out.suffix.lstrip('.')} file but --format is "
                           f"{fmt}; give --format {implied}, or another file name")
    return fmt


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        typer.echo(text, nl=not text.endswith("\n"))  # CSV ends with its own newline
    else:
        from opatlas.atomic import write_output

        write_output(out, lambda tmp: tmp.write_text(text))
        _wrote(f"wrote {out}", out)


def _wrote(message: str, out: Path) -> None:
    """Say what was written: on stderr when ``out`` is a stream (``-``, /dev/stdout, a pipe),
    whose reader must get the data alone."""
    stream = str(out) == "-" or (out.exists() and not out.is_file())
    typer.echo(message, err=stream)


def _known(value: object) -> bool:
    """Not missing (None, NaN): a std is, for rows imported from upstream samples."""
    return value is not None and value == value


def _nonzero(value: object) -> bool:
    """Known and not zero: a value the table can divide by, or a count worth a rate."""
    return _known(value) and bool(value)


def _varying(st: Store, op: str | None, status: str | None) -> list[str]:
    """Which of device and dtype take several values in the rows asked for (``--op``,
    ``--status``): the table shows those, else a shape's rows on each read the same."""
    where = " AND ".join(c for c, v in (("op = ?", op), ("status = ?", status)) if v)
    counts = st.con.execute(f"SELECT count(DISTINCT device), count(DISTINCT dtype) FROM "
                            f"results{f' WHERE {where}' if where else ''}",
                            [v for v in (op, status) if v]).fetchall()[0]
    return [k for k, n in zip(("device", "dtype"), counts, strict=True) if n > 1]


def _print_table(df, limit: int, out: Path | None, total: int,
                 varying: list[str] | None = None) -> None:
    """``varying``: the columns (device, dtype) to show, those the rows differ in."""
    from rich.console import Console
    from rich.table import Table

    from opatlas.console import print_wide

    varying = varying or []
    shown_note = f" (first {len(df)} shown; --limit 0 for all)" if len(df) < total else ""
    table = Table("op", "pass", *varying, "params", "status", "median µs", "± std %", "n",
                  "GFLOP/s", title=f"{total} result rows{shown_note}")
    shown = df if limit == 0 else df.head(limit)
    for _, r in shown.iterrows():
        params = json.loads(r["params_json"])
        short = " ".join(f"{k}={v}" for k, v in params.items() if k != "dtype")
        ok = r["status"] == "ok" and _known(r["median_ns"])
        med = f"{r['median_ns'] / 1e3:.2f}" if ok else "-"
        spread = (f"{100 * r['std_ns'] / r['mean_ns']:.1f}"
                  if ok and _nonzero(r["mean_ns"]) and _known(r["std_ns"]) else "-")
        rate = (f"{r['flops'] / r['median_ns']:.2f}"
                if ok and _nonzero(r["median_ns"]) and _nonzero(r["flops"]) else "-")
        table.add_row(r["op"], r["pass"], *(str(r[k]) for k in varying), short, r["status"],
                      med, spread, str(int(r["repeats"])), rate)
    if out is None:
        print_wide(table)
        return
    from opatlas.atomic import write_output

    def write(tmp: Path) -> None:
        with tmp.open("w") as fh:
            Console(file=fh).print(table)

    write_output(out, write)
    _wrote(f"wrote a table of {len(shown)} rows to {out}", out)


@import_app.command("results")
def import_results(
    path: Path = typer.Argument(..., help="A .parquet, .csv or .json written by `opatlas "
                                          "results`."),
    store: Path = StoreOpt,
) -> None:
    """Add results exported from another store (e.g. one per SLURM part) to this store."""
    from opatlas.store.writing import store_for_writing

    with store_for_writing(store) as st, _said_if_interrupted(st, store):
        n = st.import_results(path)
    typer.echo(f"added {n} rows to {store}")


@contextmanager
def _said_if_interrupted(st: Store, store: Path) -> Iterator[None]:
    """On Ctrl-C, say what the import had written (each write is one transaction: an
    interrupted one wrote nothing) and exit 130."""
    before = st.count()
    try:
        yield
    except KeyboardInterrupt:
        added = st.count() - before
        what = (f"{added} result row(s) had been added to {store}; importing again adds the "
                f"rest (rows already there are skipped)" if added else
                f"nothing was written to {store}")
        typer.echo(f"opatlas: import interrupted; {what}", err=True)
        raise typer.Exit(130) from None


@import_app.command("ett-samples")
def import_ett(
    directory: str = typer.Argument("bundled", help="Folder of estimate-train-time sampling "
                                                    "CSVs, or 'bundled' for the A100 dataset."),
    store: Path = StoreOpt,
) -> None:
    """Read estimate-train-time operator and NCCL sampling CSVs into the store.

    Examples:

        opatlas import ett-samples sampling_data/

        opatlas import ett-samples bundled --store a100.duckdb
    """
    from opatlas.store.ett import bundled_dataset, import_ett_samples
    from opatlas.store.writing import store_for_writing

    path = bundled_dataset() if directory == "bundled" else Path(directory)
    with store_for_writing(store) as st, _said_if_interrupted(st, store):
        added = import_ett_samples(st, path)
    typer.echo(f"added {sum(added.values())} rows from {len(added)} files to {store}")


@import_app.command("tt-sweep")
def import_tt_sweep(
    vectors: Path = typer.Option(..., "--vectors", help="vectors_export folder."),
    results: Path = typer.Option(..., "--results", help="tt-metal result JSON folder."),
    store: Path = StoreOpt,
    device: str = typer.Option("wormhole_b0", "--device",
                              help="Device the sweep ran on, as the store files it."),
) -> None:
    """Read tt-metal sweep results (device kernel durations) joined with their vectors.

    Example:

        opatlas import tt-sweep --vectors vectors_export --results results_export_batch
    """
    from opatlas.store.writing import store_for_writing
    from opatlas.tenstorrent.ttjson import import_tt

    with store_for_writing(store) as st, _said_if_interrupted(st, store):
        n = import_tt(st, vectors, results, device)
    typer.echo(f"added {n} rows to {store}")
