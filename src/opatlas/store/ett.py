"""estimate-train-time compatibility: read its sampling CSVs into the store, write them back.

Operator files are ``{GPU}_{op}_{precision}.csv`` with shape columns then ``F_dur(us)`` and
``B_dur(us)`` (or one ``dur(us)``); NCCL files are ``{GPU}_{collective}_{precision}[_{nodes}_{gpn}]
.csv`` with ``shape,nodes,GPUsPerNode,dur(us)``. Each imported value becomes one ``ok`` result
row (mean = median = the file's value); a shape sampled more than once in a file is one row over
its values (:func:`merge_repeats`). How a value was measured is known for the bundled datasets
only (:func:`sample_origin`): elsewhere the row says so, and its ``repeats`` is 0 (unknown).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from opatlas.errors import OpatlasError, StoreError
from opatlas.ops.registry import catalog_counts, lacking_params
from opatlas.samples import bundled_dataset, filed_device_name, parse_sample_name
from opatlas.store.db import ResultRow, Store
from opatlas.sweep import params_json, vector_id
from opatlas.sweep.expand import FilledParams, fill_omitted

PRECISIONS = ("fp16", "bf16", "fp32")
PASS_COLUMNS = {"F_dur(us)": "fwd", "B_dur(us)": "bwd", "dur(us)": "step", "dur": "step"}
IMPORT_BACKEND = "ett-import"
__all__ = ["EttExport", "bundled_dataset", "export_ett", "export_ett_report",
           "filed_device_name", "import_ett_samples", "merge_repeats", "parse_sample_name",
           "read_sample_file", "sample_origin"]


def read_sample_file(path: Path, counts: bool = True) -> list[ResultRow]:
    """Result rows of one sampling CSV; ``counts`` adds the catalog's FLOPs and bytes (the
    store wants them; model fitting derives its own features and skips the cost). A bad cell
    (a time that is not a number > 0, a shape parameter that is not a number) is refused in
    one line naming the file, the line and the column, as is a shape the catalog op refuses
    (``dim % mp != 0``, an ``mp`` of 0), naming the file, the line and the rule; an empty
    time cell is a value not sampled and skipped, as upstream writes them."""
    meta = parse_sample_name(path)
    if meta is None:
        return []
    header, lines = _read_cells(path)
    pass_cols = [c for c in header if c in PASS_COLUMNS]
    if not pass_cols:
        raise StoreError(f"{path}: no time column ({', '.join(PASS_COLUMNS)}); its columns "
                         f"are {', '.join(header) or 'none'}")
    shape_cols = [c for c in header if c not in pass_cols]
    kind = "nccl" if {"shape", "nodes", "GPUsPerNode"} <= set(header) else "op"
    op = f"nccl.{meta['op']}" if kind == "nccl" else meta["op"]
    if kind == "op" and (lacking := lacking_params(op, shape_cols)):
        # its rows would be filed under a shape the op's counts cannot be made from
        raise StoreError(f"{path}: no column {lacking}")
    shapes = _shape_values(path, header, lines, shape_cols)
    times = [(col, header.index(col)) for col in pass_cols]
    repeats, message = sample_origin(path)
    rows = []
    for (line, cells), params in zip(lines, shapes, strict=True):
        params["dtype"] = meta["prec"]
        if kind == "op" and (broken := _broken_rule(op, params)):
            raise StoreError(f"{path}, line {line}: {_shown_shape(params)}: {broken}; such "
                             f"a shape cannot be run or counted")
        vid = vector_id(op, params)
        flops, nbytes = catalog_counts(op, params) if counts and kind == "op" else ({}, {})
        for col, at in times:
            us = _time_us(path, line, col, cells[at])
            if us is None:
                continue
            ns = us * 1000.0
            pass_ = PASS_COLUMNS[col]
            rows.append(ResultRow(
                vector_id=vid, op=op, params_json=params_json(params), pass_=pass_,
                backend=IMPORT_BACKEND, device=meta["gpu"], dtype=meta["prec"], status="ok",
                repeats=repeats, mean_ns=ns, median_ns=ns, min_ns=ns, max_ns=ns, std_ns=None,
                flops=flops.get(pass_), min_bytes=nbytes.get(pass_),
                message=message))
    return rows


def _broken_rule(op: str, params: dict) -> str | None:
    """What makes ``params`` no shape of catalog op ``op`` (a rule it breaks, ``dim % mp !=
    0``, or a parameter contradicting the alias), else None. An op outside the catalog (a
    user's op without its module) is not checked: its rules are unknown, and said so."""
    from opatlas.ops.registry import get_op, resolved_params

    try:
        get_op(op)
    except OpatlasError:
        return None
    try:
        cat, full = resolved_params(op, params)
    except OpatlasError as exc:  # InvalidShape: a parameter the alias fixes otherwise
        return str(exc)
    reason = cat.invalid_reason(full)
    alias = f" (catalog op {cat.name!r})" if cat.name != op else ""
    return f"invalid for op {op!r}{alias}: {reason}" if reason else None


def _shown_shape(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if k != "dtype")


# what the bundled datasets' values are (each folder's PROVENANCE.md): (repeats, how)
BUNDLED_ORIGINS = {
    "ett-a100": (10, "upstream trimmed mean (3rd to 7th smallest) of 10 runs"),
    "h100": (10, "opatlas median of 10 (h100 dataset)"),
}
UNKNOWN_REPEATS = 0  # the store's count for a value whose repeats no one recorded


def sample_origin(path: Path) -> tuple[int, str]:
    """How the values of the sample file ``path`` were measured: (repeats, the rows' message).
    Known for a file of a bundled dataset only; any other file's values may be anyone's (an
    ``opatlas results --format ett`` export of a 5-repeat run, upstream's, a hand-made one):
    ``repeats`` :data:`UNKNOWN_REPEATS` and said so, rather than a guess."""
    resolved = path.resolve()
    for name, origin in BUNDLED_ORIGINS.items():
        with contextlib.suppress(StoreError):  # a dataset left out of this install
            if resolved.is_relative_to(bundled_dataset(name).resolve()):
                return origin[0], f"imported from {path.name} ({origin[1]})"
    return UNKNOWN_REPEATS, f"value from {path.name}; repeats unknown"


# cells read as "no value", as pandas reads them
_MISSING = frozenset({"", "nan", "NaN", "NA", "N/A", "n/a", "null", "NULL", "None", "<NA>"})
_BOOLS = {"true": True, "false": False}


def _read_cells(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and (line number, cells) of each non-blank row; a row whose cell count
    differs from the header's is refused, naming its line."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = [c.strip() for c in next(reader, [])]
            lines = []
            for cells in reader:
                if not any(c.strip() for c in cells):
                    continue
                if len(cells) != len(header):
                    raise StoreError(f"{path}, line {reader.line_num}: {len(cells)} cells, "
                                     f"the header has {len(header)} columns")
                lines.append((reader.line_num, [c.strip() for c in cells]))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise StoreError(f"{path}: not a readable CSV ({exc})") from None
    if not header:
        raise StoreError(f"{path}: empty file; an estimate-train-time sample CSV starts with "
                         f"a header of shape columns, then F_dur(us), B_dur(us) or dur(us)")
    return header, lines


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _shape_values(path: Path, header: list[str], lines: list[tuple[int, list[str]]],
                  shape_cols: list[str]) -> list[dict]:
    """Each row's shape: numbers, except in a column of names only (a linear's ``role``); a
    non-number in a column of numbers or in a size parameter (``dim``, ``l`` ...) is refused,
    as is an empty cell."""
    from opatlas.ops.base import SIZE_PARAMS

    shapes: list[dict] = [{} for _ in lines]
    for col in shape_cols:
        at = header.index(col)
        cells = [cells[at] for _, cells in lines]
        for (line, _), cell in zip(lines, cells, strict=True):
            if cell in _MISSING:
                raise StoreError(f"{path}, line {line}, column {col!r}: empty; every shape "
                                 f"parameter needs a value")
        numbers = [_number(c) for c in cells]
        if col not in SIZE_PARAMS and all(v is None for v in numbers):
            bools = all(c.lower() in _BOOLS for c in cells)  # as pandas reads True/False
            for shape, cell in zip(shapes, cells, strict=True):
                shape[col] = _BOOLS[cell.lower()] if bools else cell
            continue
        for (line, _), shape, cell, v in zip(lines, shapes, cells, numbers, strict=True):
            if v is None or not np.isfinite(v):
                raise StoreError(f"{path}, line {line}, column {col!r}: {cell!r} is not a "
                                 f"number; shape parameters are numbers")
            shape[col] = _num(v)
    return shapes


def _time_us(path: Path, line: int, col: str, cell: str) -> float | None:
    """A time cell in µs: None when empty (not sampled), refused unless a number > 0."""
    if cell in _MISSING:
        return None
    us = _number(cell)
    if us is None or not np.isfinite(us) or us <= 0:
        what = "not a number" if us is None else "not a time"
        raise StoreError(f"{path}, line {line}, column {col!r}: {cell!r} is {what}; times "
                         f"are µs > 0")
    return us


def merge_repeats(rows: list[ResultRow]) -> tuple[list[ResultRow], int]:
    """One row per (vector, pass): a shape sampled more than once (upstream's flash_atten file
    has 85 such) becomes one row over all its values: median, mean, min and max of them,
    ``repeats`` the sum of theirs (unknown, 0, stays so). Returns the rows and how many
    shapes had repeats."""
    groups: dict[tuple[str, str], list[ResultRow]] = {}
    for row in rows:
        groups.setdefault((row.vector_id, row.pass_), []).append(row)
    merged, repeated = [], set()
    for (vid, _), same in groups.items():
        if len(same) > 1:
            repeated.add(vid)
            same[0] = _merged(same)
        merged.append(same[0])
    return merged, len(repeated)


def _merged(rows: list[ResultRow]) -> ResultRow:
    values = np.array([r.median_ns for r in rows], dtype=float)
    first = rows[0]
    return dataclasses.replace(
        first, repeats=sum(r.repeats for r in rows), median_ns=float(np.median(values)),
        mean_ns=float(values.mean()), min_ns=float(values.min()), max_ns=float(values.max()),
        message=f"{first.message}; this shape sampled {len(rows)} times: median, mean, min "
                f"and max over them")


def import_ett_samples(store: Store, directory: str | Path) -> dict[str, int]:
    """Import every sampling CSV under ``directory`` (recursively); returns rows per file.
    A shape a file holds more than once is stored once, over all its values
    (:func:`merge_repeats`), and said on stderr."""
    directory = Path(directory)
    if not directory.is_dir():
        raise StoreError(f"{directory} is not a directory of estimate-train-time CSVs")
    added: dict[str, int] = {}
    samples = [p for p in sorted(directory.rglob("*.csv")) if parse_sample_name(p)]
    # every file read (and checked) before any is added: a bad one leaves the store as it was
    read = [(path, *merge_repeats(read_sample_file(path))) for path in samples]
    for path, rows, repeated in read:
        if rows and (note := _outside_catalog(rows[0].op, path)):
            print(f"opatlas: note: {note}", file=sys.stderr)
        if repeated:
            print(f"opatlas: note: {rows[0].op} ({path.name}): {repeated} shape(s) appear "
                  f"more than once; each is stored once, with the median (and mean, min, "
                  f"max) of its values", file=sys.stderr)
        if rows:
            added[str(path.relative_to(directory))] = store.add_results(rows)
    if not added:
        raise StoreError(f"the {len(samples)} estimate-train-time sample file(s) under "
                         f"{directory} hold no rows" if samples else
                         f"no estimate-train-time sample files ({{GPU}}_{{op}}_{{precision}}"
                         f".csv) found under {directory}")
    return added


def _outside_catalog(op: str, path: Path) -> str | None:
    """What importing samples of ``op`` (from ``path``) lacks when the op catalog does not
    know it (a user's op whose module was not given): its parameters are not checked and
    its rows have no FLOP or byte counts. None for a catalog op or a collective."""
    from opatlas.ops.registry import get_op

    if op.startswith("nccl."):
        return None
    try:
        get_op(op)
    except OpatlasError:
        return (f"op {op!r} ({path.name}) is not in the op catalog: its rows are stored with "
                f"the parameters the file gives, unchecked, and without FLOP or byte counts; "
                f"if it is your own op, pass the module that registers it with --ops-module "
                f"FILE")
    return None


@dataclasses.dataclass
class EttExport:
    """What :func:`export_ett_report` did: the files written, the result rows left out
    because they did not succeed (by status: the layout holds times only), and ``notes``:
    the parameters filled with the catalog's default, the ok rows that still could not be
    written (``unwritten`` of them) and the shapes written on more than one line."""

    paths: list[Path]
    left_out: dict[str, int]
    notes: list[str] = dataclasses.field(default_factory=list)
    unwritten: int = 0

    def note(self) -> str | None:
        """One line on the rows left out, or None when none was."""
        if not self.left_out:
            return None
        return (f"left out {_statuses(self.left_out)}: the estimate-train-time layout holds "
                f"measured times only")

    def messages(self) -> list[str]:
        """Every line to say: :meth:`note`, then ``notes``."""
        return [m for m in (self.note(), *self.notes) if m is not None]


def _statuses(counts: dict[str, int]) -> str:
    each = ", ".join(f"{status} {k}" for status, k in sorted(counts.items()))
    return f"{sum(counts.values())} result row(s) that did not succeed ({each})"


PASS_NAMES = {"fwd": "F_dur(us)", "bwd": "B_dur(us)", "step": "dur(us)"}


def export_ett_report(store: Store, outdir: str | Path) -> EttExport:
    """Write results back in upstream's layout: one CSV per (device, op, dtype), shape columns
    then ``F_dur(us)``/``B_dur(us)`` (or ``dur(us)``) from the median, one line per vector
    (and backend). A parameter some rows leave out is written as the catalog's default
    (:func:`opatlas.sweep.expand.fill_omitted`); a row still lacking one (no default) is not
    written, and counted. A store with no ok result is refused, naming what it holds."""
    df = store.results(expand_params=False)
    failed = df[df["status"] != "ok"]
    left_out = {str(k): int(v) for k, v in failed["status"].value_counts().items()}
    df = df[df["status"] == "ok"]
    if df.empty:
        held = f"it holds {_statuses(left_out)} only" if left_out else "it is empty"
        raise StoreError(f"{store.path}: no ok result to write in the estimate-train-time "
                         f"layout; {held}")
    df, no_layout = _with_layout(df)
    if df.empty:
        raise StoreError(f"{store.path}: no ok result has an estimate-train-time layout; "
                         f"{'; '.join(no_layout)}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    done = EttExport([], left_out, notes=no_layout)
    filled: dict[str, FilledParams] = {}
    for (device, op, dtype), g in df.groupby(["device", "op", "dtype"]):
        wide, shape_cols, fill = _wide(str(op), g)
        _tally(filled.setdefault(str(op), FilledParams([])), fill)
        if wide.empty:
            continue
        if shape_cols and (repeated := int(wide.duplicated(shape_cols).sum())):
            done.notes.append(f"{op} ({device}, {dtype}): {repeated} shape(s) on more than one "
                              f"line, measured under more than one vector or backend (an "
                              f"import stores each once, over all its values)")
        name = str(op).removeprefix("nccl.")
        path = outdir / f"{str(device).replace(' ', '')}_{name}_{dtype}.csv"
        wide.to_csv(path, index=False)
        done.paths.append(path)
    for op, fill in filled.items():
        done.notes += fill.notes(op, "ok result row(s)", "not written (a file's rows all "
                                                         "need the same shape columns)")
        done.unwritten += len(fill.incomplete)
    return done


def _with_layout(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The rows of the ops that upstream's layout can hold, and a line for each op it cannot:
    one whose rows set a parameter to a list or mapping (a reshard's ``input_shape``), as a
    cell of that layout holds one number or name."""
    lines, nested = [], []
    for op, g in df.groupby("op", sort=True):
        keys = sorted({k for s in g["params_json"].unique() for k, v in json.loads(s).items()
                       if isinstance(v, list | dict)})
        if keys:
            nested.append(op)
            lines.append(f"{op}: {len(g)} ok result row(s) not written: its parameter(s) "
                         f"{', '.join(keys)} hold lists, and a cell of the estimate-train-time "
                         f"layout holds one number or name")
    return df[~df["op"].isin(nested)], lines


def _wide(op: str, g: pd.DataFrame) -> tuple[pd.DataFrame, list[str], FilledParams]:
    """One file's table: per (vector, backend), its shape then its time of each pass; the
    rows left lacking a parameter (see :func:`export_ett_report`) are not in it."""
    fill = fill_omitted(op, (json.loads(s) for s in g["params_json"]))
    keep = np.ones(len(g), dtype=bool)
    keep[fill.incomplete] = False
    g = g[keep]
    params = pd.DataFrame([p for p, k in zip(fill.params, keep, strict=True) if k],
                          index=g.index)
    shape_cols = [c for c in params.columns if c != "dtype"]
    if g.empty:
        return pd.DataFrame(), shape_cols, fill
    frame = params[shape_cols].assign(_vector=g["vector_id"], _backend=g["backend"])
    keys = ["_vector", "_backend"]
    times = g.assign(_vector=g["vector_id"], _backend=g["backend"], _us=g["median_ns"] / 1000.0
                     ).pivot_table(index=keys, columns="pass", values="_us", aggfunc="first")
    wide = frame.drop_duplicates(keys).set_index(keys).join(times.rename(columns=PASS_NAMES))
    wide = wide.reset_index(drop=True)
    with contextlib.suppress(TypeError):  # a column of numbers and names: the store's order
        wide = wide.sort_values(shape_cols, kind="stable", ignore_index=True)
    cols = shape_cols + [PASS_NAMES[p] for p in ("fwd", "bwd", "step") if PASS_NAMES[p] in wide]
    return wide[cols], shape_cols, fill


def _tally(total: FilledParams, one: FilledParams) -> None:
    """Add one file's fills to an op's, for one line per op."""
    for k, (v, n) in one.filled.items():
        total.filled[k] = (v, total.filled.get(k, (v, 0))[1] + n)
    for k, n in one.lacking.items():
        total.lacking[k] = total.lacking.get(k, 0) + n
    total.incomplete += one.incomplete


def export_ett(store: Store, outdir: str | Path) -> list[Path]:
    """:func:`export_ett_report`'s files; what it left out or filled in is said on stderr."""
    done = export_ett_report(store, outdir)
    for note in done.messages():
        print(f"opatlas: note: {note}", file=sys.stderr)
    return done.paths


def _num(v: object) -> object:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v
