"""``opatlas results`` and ``opatlas import``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from opatlas.cli.common import OpsModuleOpt, StoreOpt, load_ops_modules
from opatlas.console import counted
from opatlas.errors import OpatlasError
from opatlas.tables import PARQUET_SUFFIXES

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table

    from opatlas.store import Store
    from opatlas.store.db import ImportCounts, ParamFilter

import_app = typer.Typer(help="Read results made elsewhere into the store.", no_args_is_help=True)
FORMATS = ("table", "csv", "json", "parquet", "ett")


def results(
    store: Path = StoreOpt,
    fmt: str | None = typer.Option(
        None, "--format", help="table | csv | json | parquet | ett (upstream CSVs of every ok "
                               "row, needs --out DIR); default: from --out's extension, else "
                               "table"),
    out: str | None = typer.Option(
        None, "--out", help="Write to this file instead of stdout: .csv, .json, .parquet or .pq "
                            "(the format follows), .txt or no extension (a text table), or "
                            "'-' (stdout); a folder for --format ett."),
    op: str | None = typer.Option(None, "--op", help="Only this op (and rows filed under its "
                                                     "aliases); not with --format ett."),
    status: str | None = typer.Option(None, "--status", help="Only rows with this status; "
                                                             "not with --format ett."),
    limit: int | None = typer.Option(
        None, "--limit", min=0, help="At most this many rows (0: all); default: 50 for "
                                     "--format table, else all. Not with --format ett, which "
                                     "writes every ok row."),
) -> None:
    """Print or export the results table.

    Examples:

        opatlas results

        opatlas results --format csv --out results.csv

        opatlas results --format parquet --out results.parquet --op linear

        opatlas results --format ett --out sampling_data/
    """
    fmt = _format(fmt, out)
    path = _out_path(out, fmt)
    if fmt == "ett":
        _export_ett(store, path, op=op, status=status, limit=limit)
        return
    from opatlas.store.db import STATUSES

    if status is not None and status not in STATUSES:
        raise OpatlasError(f"--status {status!r}: a result's status is one of "
                           f"{', '.join(STATUSES)}")
    df, total, varying = _read(store, fmt, op, status, limit)
    if fmt == "table":
        _print_table(df, path, total, varying)
    elif fmt == "csv":
        _emit(df.to_csv(index=False), path, len(df))
    elif fmt == "json":
        _emit(json_records(df), path, len(df))
    else:
        from opatlas.atomic import write_output

        write_output(path, lambda tmp: df.to_parquet(tmp, index=False))
        _wrote(f"wrote {counted(len(df), 'row')} to {_shown(path)}", path)


TABLE_ROWS = 50  # what --format table shows when no --limit is given


def _read(store: Path, fmt: str, op: str | None, status: str | None, limit: int | None
          ) -> tuple[pd.DataFrame, int, list[str]]:
    """The rows asked for (at most ``limit``; 0 or None: all, but 50 for the text table when
    no limit is given), the count of all that match, and the columns the table shows too.
    ``op``: as the store files it (:func:`_as_stored`), maybe several names."""
    from opatlas.store import Store
    from opatlas.store.db import plain_errors

    if limit is None and fmt == "table":
        limit = TABLE_ROWS
    with Store(store, read_only=True) as st, plain_errors(store):
        stored = st.ops()
        ops, params = _as_stored(op, stored)
        _check_op(ops[0] if len(ops) == 1 else None, stored)
        total = st.count_results(ops, status, params)
        df = st.results(op=ops, status=status, params=params, limit=limit or None,
                        by_params=fmt == "table", expand_params=False)
        varying = _varying(st, ops, status) if fmt == "table" else []
    if fmt != "table":  # the text table shows the parameters from params_json
        df = with_param_columns(df)
    return df, total, varying


PARAM_PREFIX = "param."  # before a parameter named like a results column (``param.status``)


def with_param_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with one column per parameter (from ``params_json``) after the results columns.

    A parameter named like a results column (a user op's ``status``, ``median_ns``,
    ``backend`` ...) would lose its values to the measured ones: its column is named
    :data:`PARAM_PREFIX` + its name instead, said on stderr. ``dtype`` is no clash: a
    result's dtype is its vector's ``dtype`` parameter."""
    from opatlas.store.db import expand_param_columns

    if df.empty or "params_json" not in df:
        return df
    renames = _param_renames(df)
    if not renames:
        return expand_param_columns(df)
    for op, names in _ops_with(df, renames).items():
        typer.echo(f"opatlas: note: op {op!r}: parameter(s) {', '.join(names)} named like "
                   f"results columns, written as {', '.join(renames[n] for n in names)} (the "
                   f"results columns hold the measured values; params_json holds the "
                   f"parameters under their own names)",
                   err=True)
    renamed = [json.dumps({renames.get(k, k): v for k, v in json.loads(s).items()})
               for s in df["params_json"]]
    out = expand_param_columns(df.assign(params_json=renamed))
    out["params_json"] = df["params_json"]
    return out


def _param_renames(df: pd.DataFrame) -> dict[str, str]:
    """Each parameter of ``df``'s rows named like a results column (not ``dtype``) -> the
    column name it is written under: :data:`PARAM_PREFIX` + its name, prefixed again while
    that is taken too."""
    from opatlas.store.db import RESULT_COLUMNS

    keys = dict.fromkeys(k for s in df["params_json"].unique() for k in json.loads(s))
    taken = {*keys, *RESULT_COLUMNS, *map(str, df.columns)}
    renames: dict[str, str] = {}
    for key in keys:
        if key in RESULT_COLUMNS and key != "dtype":
            name = PARAM_PREFIX + key
            while name in taken:
                name = PARAM_PREFIX + name
            taken.add(name)
            renames[key] = name
    return renames


def _ops_with(df: pd.DataFrame, renames: dict[str, str]) -> dict[str, list[str]]:
    """Each op of ``df`` whose rows set any of ``renames``' parameters -> those parameters."""
    found: dict[str, dict[str, None]] = {}
    for op, pj in df[["op", "params_json"]].drop_duplicates().itertuples(index=False):
        names = [k for k in json.loads(pj) if k in renames]
        if names:
            found.setdefault(str(op), {}).update(dict.fromkeys(names))
    return {op: list(names) for op, names in found.items()}


def _check_op(op: str | None, stored: list[str]) -> None:
    """Refuse an op the store holds no row of, naming those it does (the closest first)."""
    if op is None or op in stored:
        return
    import difflib

    close = difflib.get_close_matches(op, stored, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise OpatlasError(f"--op {op}: the store has no op {op!r}; it has "
                       f"{', '.join(stored) or 'none'}{hint}")


def _export_ett(store: Path, out: Path, *, op: str | None, status: str | None,
                limit: int | None) -> None:
    """``--format ett``: every ok row, in upstream's folder of CSVs."""
    given = [f"--{k} {v}" for k, v in (("op", op), ("status", status), ("limit", limit))
             if v is not None]
    if given:
        raise OpatlasError(f"{', '.join(given)}: --format ett writes every ok row of the "
                           f"store; export with --format csv to choose rows")
    if out.exists() and not out.is_dir():
        raise OpatlasError(f"--out {out}: --format ett writes a folder of CSVs, and this is "
                           f"a file")
    from opatlas.store import Store
    from opatlas.store.db import plain_errors
    from opatlas.store.ett import export_ett

    with Store(store, read_only=True) as st, plain_errors(store):
        paths = export_ett(st, out)
    for written in paths:
        typer.echo(str(written))


def _as_stored(op: str | None, stored: list[str]) -> tuple[list[str], ParamFilter | None]:
    """``--op`` as the store files it, as the names to read (none: every op): a catalog op and
    an estimate-train-time name of it (``flash_attention``, ``flash_atten``) are one op; an
    alias that fixes parameters (``linear1``: a linear of role qkv) filed under another name
    keeps only the rows with those values; a catalog op filed under several of its aliases
    (``linear`` as ``linear1`` .. ``linear_final``) reads all of them. Said when they differ."""
    if op is None:
        return [], None
    if op in stored:
        return [op], None
    from opatlas.ops.registry import filed_as, get_op
    from opatlas.store.db import ParamFilter

    same = filed_as(op, stored)
    if len(same) > 1:
        return _several_aliases(op, same), None
    if not same:
        return [op], None  # refused by _check_op, naming what the store has
    name, values = same[0]
    rows = f" (its rows with {', '.join(f'{k}={v}' for k, v in values.items())})" \
        if values else ""
    typer.echo(f"note: --op {op}: the store files it as {name!r}{rows}", err=True)
    return [name], ParamFilter(values, get_op(op)[0].defaults) if values else None


def _several_aliases(op: str, same: list[tuple[str, dict]]) -> list[str]:
    """The stored names of ``op`` when it is filed under several (:func:`filed_as`): all of
    them, said on stderr, when each holds ``op``'s rows whole; refused, naming them, when
    some would keep only rows with certain values (one filter cannot serve several names)."""
    names = [name for name, _ in same]
    listed = ", ".join(names)
    if any(values for _, values in same):
        raise OpatlasError(f"--op {op}: {op} is stored under its aliases {listed}: give one")
    typer.echo(f"note: --op {op}: the store files it under its aliases {listed}; "
               f"reading the rows of all of them", err=True)
    return names


BY_SUFFIX = {".csv": "csv", ".json": "json", **dict.fromkeys(PARQUET_SUFFIXES, "parquet")}
TEXT_SUFFIXES = ("", ".txt")  # --out's names for the text table, the format when none is given


def _format(fmt: str | None, out: str | None) -> str:
    """--format as given, or from --out's extension; a data format must match its file's."""
    suffix = Path(out).suffix.lower() if out is not None else ""
    implied = BY_SUFFIX.get(suffix) if out is not None else None
    if fmt is None and out is not None and implied is None and suffix not in TEXT_SUFFIXES:
        raise OpatlasError(f"--out {out}: unknown extension {Path(out).suffix!r}; --out takes "
                           f"{', '.join(BY_SUFFIX)} (the format follows), .txt or no "
                           f"extension (a text table), or give --format")
    if fmt is None:
        fmt = implied or "table"
    if fmt not in FORMATS:
        raise OpatlasError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt in ("parquet", "ett") and out is None:
        raise OpatlasError(f"--format {fmt} needs --out {'DIR' if fmt == 'ett' else 'FILE'}")
    if implied is not None and fmt != implied:
        raise OpatlasError(f"--out {out} is a .{suffix.lstrip('.')} file but --format is "
                           f"{fmt}; give --format {implied}, or another file name")
    return fmt


def _out_path(out: str | None, fmt: str) -> Path | None:
    """--out as a path: a folder for --format ett (never ``-``), a file (or ``-``, stdout)
    for the others. A name ending in ``/`` means a folder, which ``Path`` would drop."""
    if out is None:
        return None
    path = Path(out)
    folder = out.endswith(("/", os.sep)) or path.is_dir()
    if fmt == "ett":
        if out == "-":
            raise OpatlasError("--out -: --format ett writes a folder of CSVs, which cannot go "
                               "to stdout; give a folder name")
        return path
    if folder:
        ext = {"table": ".txt", "parquet": ".parquet"}.get(fmt, f".{fmt}")
        raise OpatlasError(f"--out {out}: a folder, and --format {fmt} writes one file; give "
                           f"a file name such as {path / ('results' + ext)} (--format ett "
                           f"writes a folder of CSVs)")
    return path


def json_records(df: pd.DataFrame) -> str:
    """``df`` as a JSON list of records that reads back exactly: floats as Python writes
    them (the shortest text of the same double; pandas' writer keeps 10 decimals), times as
    ISO 8601 with microseconds (pandas': milliseconds), a missing value as null."""
    cols = [str(c) for c in df.columns]
    records = [dict(zip(cols, map(_json_value, row), strict=True))
               for row in df.itertuples(index=False, name=None)]
    return json.dumps(records, allow_nan=False)


def _json_value(value: object) -> object:
    """One cell as a JSON-ready Python value (see :func:`json_records`)."""
    import numpy as np
    import pandas as pd

    if isinstance(value, list | dict | tuple):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if value is None or pd.isna(value):
        return None
    if isinstance(value, datetime):  # pd.Timestamp too
        return value.isoformat(timespec="microseconds")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _emit(text: str, out: Path | None, rows: int) -> None:
    """``text`` (``rows`` rows) on stdout, or written to ``out`` and said."""
    if out is None:
        typer.echo(text, nl=not text.endswith("\n"))  # CSV ends with its own newline
    else:
        from opatlas.atomic import write_output

        write_output(out, lambda tmp: tmp.write_text(text))
        _wrote(f"wrote {counted(rows, 'row')} to {_shown(out)}", out)


def _shown(out: Path) -> str:
    """``out`` as the user should read it: ``-`` is standard output."""
    return "standard output" if str(out) == "-" else str(out)


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


def _varying(st: Store, ops: list[str], status: str | None) -> list[str]:
    """Which of device and dtype take several values in the rows asked for (``--op``, as
    the store files it, ``--status``): the table shows those, else a shape's rows on each
    read the same."""
    conds = [f"op IN ({', '.join('?' * len(ops))})"] if ops else []
    conds += ["status = ?"] if status else []
    where = " AND ".join(conds)
    counts = st.con.execute(f"SELECT count(DISTINCT device), count(DISTINCT dtype) FROM "
                            f"results{f' WHERE {where}' if where else ''}",
                            [*ops, *([status] if status else [])]).fetchall()[0]
    return [k for k, n in zip(("device", "dtype"), counts, strict=True) if n > 1]


# the spread next to the median, as a share of it: the std of the repeats over their median
# (std over the mean would understate it where an outlier pulls the mean up; a robust spread,
# MAD or IQR, would need the samples, which the store does not keep)
SPREAD = "std % of median"
PLAIN_ROWS = 1000  # beyond this many rows the table is plain fixed-width text: rich's takes
# 35 s for 51,791 rows, plain text well under one


def _print_table(df: pd.DataFrame, out: Path | None, total: int,
                 varying: list[str] | None = None) -> None:
    """``df``'s rows as a text table, to ``out`` or stdout; ``varying``: the columns (device,
    dtype) to show, those the rows differ in. A long one is plain text (:data:`PLAIN_ROWS`)."""
    varying = varying or []
    shown_note = f" (first {len(df)} shown; --limit 0 for all)" if len(df) < total else ""
    title = f"{total} result rows{shown_note}"
    header = ["op", "pass", *varying, "params", "status", "median µs", SPREAD, "n", "GFLOP/s"]
    rows = _table_rows(df, varying)
    plain = len(rows) > PLAIN_ROWS
    if out is None:
        if plain:
            typer.echo(_plain_table(title, header, rows), nl=False)
        else:
            from opatlas.console import print_wide

            print_wide(_rich_table(title, header, rows))
        return
    from opatlas.atomic import write_output

    def write(tmp: Path) -> None:
        if plain:
            tmp.write_text(_plain_table(title, header, rows))
            return
        from opatlas.console import print_wide

        with tmp.open("w") as fh:  # a file has no width: the table's own, not 80 columns
            print_wide(_rich_table(title, header, rows), file=fh)

    write_output(out, write)
    _wrote(f"wrote a table of {counted(len(rows), 'row')} to {_shown(out)}", out)


def _table_rows(df: pd.DataFrame, varying: list[str]) -> list[list[str]]:
    """Each row's cells: its op, pass, ``varying`` columns, parameters (all but dtype),
    status, median µs, std as % of the median (:data:`SPREAD`), repeats and GFLOP/s (``-``
    where unknown)."""
    if df.empty:
        return []
    cols = ["op", "pass", *varying, "params_json", "status", "median_ns", "std_ns", "repeats",
            "flops"]
    rows = []
    for values in zip(*(df[c].tolist() for c in cols), strict=True):
        *head, pj, status, med_ns, std_ns, repeats, flops = values
        short = " ".join(f"{k}={v}" for k, v in json.loads(pj).items() if k != "dtype")
        ok = status == "ok" and _known(med_ns)
        med = f"{med_ns / 1e3:.2f}" if ok else "-"
        spread = (f"{100 * std_ns / med_ns:.1f}"
                  if ok and _nonzero(med_ns) and _known(std_ns) else "-")
        rate = f"{flops / med_ns:.2f}" if ok and _nonzero(med_ns) and _nonzero(flops) else "-"
        rows.append([*(str(v) for v in head), short, str(status), med, spread,
                     _count(repeats, ok), rate])
    return rows


def _count(repeats: Any, ok: bool) -> str:
    """The table's ``n``: ``?`` for a measured row that does not know it (0 or missing: a
    value imported from someone's sample file), ``-`` for a failed one that lacks it."""
    if _nonzero(repeats):
        return str(int(repeats))
    return "?" if ok else ("0" if _known(repeats) else "-")


def _rich_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    from rich.table import Table

    table = Table(*header, title=title)
    for row in rows:
        table.add_row(*row)
    return table


def _plain_table(title: str, header: list[str], rows: list[list[str]]) -> str:
    """The table as fixed-width text: the title, the header, a rule, then one line a row,
    each column as wide as its widest cell."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([title, line(header), rule, *map(line, rows)]) + "\n"


@import_app.command("results")
def import_results(
    path: Path = typer.Argument(..., help="A .parquet, .csv or .json written by `opatlas "
                                          "results`."),
    store: Path = StoreOpt,
) -> None:
    """Add results exported from another store (e.g. one per SLURM part) to this store."""
    from opatlas.store.writing import store_for_writing

    with store_for_writing(store) as st, _said_if_interrupted(st, store):
        counts = st.import_results_counted(path)
    typer.echo(imported_line(counts, store))


def imported_line(counts: ImportCounts, store: Path) -> str:
    """What an import added, and what it did not: rows the store held (kept as stored), how
    many of those measured other values, rows the file held twice."""
    line = f"added {counts.added} rows to {store}"
    if counts.present:
        line += f"; {counts.present} already present (the stored ones kept)"
        if counts.differ:
            line += (f", {counts.differ} of them with other measured values than the file's "
                     f"(import into another --store to keep the file's)")
    if counts.repeated:
        line += f"; {counts.repeated} repeated a key earlier in the file (the first kept)"
    return line


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
                                                    "CSVs, or a bundled dataset: 'bundled' "
                                                    "(A100) or 'h100'."),
    store: Path = StoreOpt,
    ops_module: list[str] | None = OpsModuleOpt,
) -> None:
    """Read estimate-train-time operator and NCCL sampling CSVs into the store.

    Samples of your own op need its module (--ops-module): its parameters are checked and
    its FLOPs and bytes counted; without it they are stored as the file gives them, and said.

    Examples:

        opatlas import ett-samples sampling_data/

        opatlas import ett-samples bundled --store a100.duckdb

        opatlas import ett-samples my_samples/ --ops-module my_ops.py
    """
    load_ops_modules(ops_module)
    from opatlas.samples import BUNDLED_OPS
    from opatlas.store.ett import bundled_dataset, import_ett_samples
    from opatlas.store.writing import store_for_writing

    bundled = directory in BUNDLED_OPS and not Path(directory).exists()
    path = bundled_dataset(BUNDLED_OPS[directory]) if bundled else Path(directory)
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
