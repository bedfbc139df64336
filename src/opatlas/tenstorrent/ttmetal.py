"""tt-metal's device-profiler CSV (``ops_perf_results_*.csv``) read through Tenstorrent's own
``tt-perf-report`` (PyPI), so that device time, op-to-op gap, cores, DRAM %, FLOPs %, the Bound
class (DRAM / FLOP / BOTH / SLOW / HOST) and the signpost window mean exactly what its report
means: its functions do the reading, the signpost filter, the multi-device merge, the per-op
analysis and the Bound classification; this module runs them in the order its report does and
keeps the rows instead of printing them.

What it adds: per device and merged totals, a per-op-code summary, op-to-op gap totals, the top
ops by device time, and beside tt-metal's ``PM IDEAL/COMPUTE/BANDWIDTH`` columns opatlas's own
bound — Orojenesis traffic at the cores' L1 for matmuls, FLOPs at the cores' peak for convs
(compute only), and for the other ops, reshards included, their least DRAM traffic (their
DRAM tensors read or written once, sized from the CSV's tensor columns) at the DRAM bandwidth
— and for reshards the calibrated Wormhole reshard simulator's estimate (where the row pins
down the shape, grids and strategies)."""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import re
import zlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from opatlas.errors import OpatlasError

REQUIRED = ("OP CODE", "OP TYPE", "GLOBAL CALL COUNT", "DEVICE ID", "ATTRIBUTES", "MATH FIDELITY",
            "CORE COUNT", "DEVICE KERNEL DURATION [ns]", "OP TO OP LATENCY [ns]",
            "INPUT_0_MEMORY")
PM_COLUMNS = {"PM IDEAL [ns]": "pm_ideal_ns", "PM COMPUTE [ns]": "pm_compute_ns",
              "PM BANDWIDTH [ns]": "pm_bandwidth_ns"}
RESHARD_OPS = ("ReshardDeviceOperation", "InterleavedToShardedDeviceOperation",
               "ShardedToInterleavedDeviceOperation")
CONV_OPS = ("OptimizedConvNew", "Conv2d")  # the op codes tt-perf-report reads as convs
RAW = "_csv_row"    # where a report row keeps its CSV row
HIGH_GAP_US = 6.5   # tt-perf-report's "High Op-to-Op Gap" advice threshold
GAP_FLOOR_US = 6.0  # ... and the gap it counts as unavoidable without tracing


def perf_report_module() -> Any:
    try:
        import tt_perf_report.perf_report as tpr
    except ImportError:
        raise OpatlasError("reading a tt-metal profiler CSV needs Tenstorrent's tt-perf-report "
                           "package: pip install 'opatlas[tt]'") from None
    return tpr


def tt_perf_report_version() -> str:
    from importlib.metadata import version

    return version("tt-perf-report")


@dataclass
class Window:
    start_signpost: str | None = None
    end_signpost: str | None = None
    ignore_signposts: bool = False
    arch: str | None = None
    tracing_mode: bool = False


@dataclass
class Report:
    path: Path
    spec: Any                 # tt-perf-report's ArchitectureSpec
    arch: str
    worker_cores: int
    csv_format: Any           # tt-perf-report's CsvFormat
    window: str
    signposts: list[str]
    devices: list[int]
    per_device: dict[Any, list[dict[str, Any]]]   # device -> tt-perf-report rows
    merged: list[dict[str, Any]]  # each row's CSV row is under RAW
    notes: list[str] = field(default_factory=list)
    # what --strict refuses once the rows are read (cells it cannot use, a chip assumed), as
    # the error lines it gives; each is also said in ``notes``
    refusals: list[str] = field(default_factory=list)


# compressions pandas reads from the path, which opatlas leaves to it (.gz it opens itself,
# to say a truncated or mis-named file for what it is)
PANDAS_COMPRESSED = (".zip", ".bz2", ".xz", ".zst", ".tar")
GZIP_MAGIC = b"\x1f\x8b"


def read_csv(path: Path) -> pd.DataFrame:
    """The CSV's rows, each cell as written (DEVICE ID too: ``_run`` reads it as a number once
    its malformed cells are said). A gzip file cut short or not gzip at all, and a row with
    fewer fields than the header (a file cut short: pandas would pad it with blanks), are
    errors naming the file."""
    text = read_text(path)
    try:
        df = pd.read_csv(path if text is None else io.StringIO(text), low_memory=False)
    except FileNotFoundError:
        raise OpatlasError(f"{path}: no such file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise OpatlasError(f"{path} is not a tt-metal profiler CSV: it cannot be read as CSV "
                           f"({exc})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        shown = ", ".join(map(str, list(df.columns)[:6]))
        raise OpatlasError(f"{path} is not a tt-metal device-profiler CSV "
                           f"(ops_perf_results_*.csv): its header lacks {', '.join(missing)} "
                           f"(it starts: {shown} ...)")
    if text is not None:
        check_field_counts(path, text, len(df.columns))
    return df


def read_text(path: Path) -> str | None:
    """The file's text, a ``.gz`` one decompressed; None for the other compressions pandas
    reads itself (PANDAS_COMPRESSED)."""
    name = path.name.lower()
    if name.endswith(PANDAS_COMPRESSED):
        return None
    gz = name.endswith(".gz")
    try:
        with (gzip.open if gz else open)(path, "rt", encoding="utf-8-sig", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        raise OpatlasError(f"{path}: no such file") from None
    except EOFError:
        raise OpatlasError(f"{path}: a truncated gzip file (its compressed data ends before "
                           f"the end of the stream): copy it again, or give the CSV "
                           f"uncompressed") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        if gz and _head(path) != GZIP_MAGIC:
            raise OpatlasError(f"{path}: not a gzip file, though its name ends in .gz (it "
                               f"starts {_head(path, 16)!r}): if it is the plain CSV, name "
                               f"it .csv") from None
        raise OpatlasError(f"{path}: corrupt gzip data ({exc})") from None
    except UnicodeDecodeError as exc:
        if _head(path) == GZIP_MAGIC:
            raise OpatlasError(f"{path}: a gzip file, though its name does not end in .gz: "
                               f"name it .csv.gz") from None
        raise OpatlasError(f"{path} is not a tt-metal profiler CSV: it cannot be read as CSV "
                           f"({exc})") from None
    except OSError as exc:
        raise OpatlasError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _head(path: Path, n: int = 2) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


def check_field_counts(path: Path, text: str, header_fields: int) -> None:
    """Every row has the header's fields (empty ones included): a row with fewer is a file cut
    short, or a row with fields lost, whose missing cells pandas would read as blanks. Blank
    lines are skipped, as pandas skips them; a row with more fields is pandas' error."""
    reader = csv.reader(io.StringIO(text))
    next(reader, None)  # the header
    short: list[tuple[int, int]] = []
    last = 0
    for rec in reader:
        if rec:
            last = reader.line_num
            if len(rec) < header_fields:
                short.append((reader.line_num, len(rec)))
    if not short:
        return
    line, fields = short[0]
    why = ("the file ends in the middle of this row: it was cut short" if line == last
           else "a row with fields missing")
    more = f"; {len(short) - 1} more line(s) like it" if len(short) > 1 else ""
    raise OpatlasError(f"{path}: line {line} has {fields} of the header's {header_fields} "
                       f"fields ({why}){more}")


def load(path: str | Path, window: Window | None = None, strict: bool = False) -> Report:
    tpr = perf_report_module()
    path, window = Path(path), window or Window()
    df = read_csv(path)
    out = io.StringIO()
    tpr.set_color_output(False, True)
    with contextlib.redirect_stdout(out):  # tt-perf-report prints its progress ...
        report = _run(tpr, path, df, window, strict)
    # ... and its warnings (unclassified ops, invalid durations, ops missing on a device),
    # which become notes rather than vanish
    report.notes += [f"tt-perf-report: {line.strip()}" for line in out.getvalue().splitlines()
                     if line.lstrip().startswith("Warning")]
    return report


# names tt-perf-report's ArchitectureSpec.from_name also takes for a chip it registers
ARCH_ALIASES = ("wormhole_b0", "p150", "p100")


def known_archs(tpr: Any) -> str:
    """The chips tt-perf-report knows, as --device takes them (any case): its registered
    names, each with the aliases from_name resolves to it."""
    names = list(getattr(tpr.ArchitectureSpec, "_SPECS", {}))
    out = []
    for name in names:
        alias = [a for a in ARCH_ALIASES if _arch_name(tpr, a) == name]
        out.append(f"{name} ({', '.join(alias)})" if alias else name)
    return ", ".join(out)


def _arch_name(tpr: Any, name: str) -> str | None:
    """tt-perf-report's name for a chip (its spelling normalised), None for one it does not
    know."""
    try:
        return tpr.ArchitectureSpec.from_name(str(name).strip()).name
    except ValueError:
        return None


def _written_arch(df: pd.DataFrame) -> str | None:
    """The CSV's DEVICE ARCH (its first non-blank value), None where it names none."""
    if "DEVICE ARCH" not in df.columns:
        return None
    values = [v for v in df["DEVICE ARCH"].dropna().astype(str) if v.strip()]
    return values[0] if values else None


def _arch_spec(tpr: Any, path: Path, df: pd.DataFrame, arch: str | None
               ) -> tuple[Any, Any, list[str], list[str]]:
    """The CSV's format, tt-perf-report's architecture (--device's chip, else the file's
    DEVICE ARCH in v2.1, else tt-perf-report's default, Wormhole), its notes and what
    --strict refuses: a chip neither named nor in the file is assumed, and said."""
    fmt = tpr.detect_csv_format(df)
    if arch is not None and _arch_name(tpr, arch) is None:
        raise OpatlasError(f"--device {arch}: not a chip tt-perf-report knows; a tt-metal CSV "
                           f"takes {known_archs(tpr)} (in any case)")
    arch = None if arch is None else str(arch).strip().lower()
    try:
        if fmt == tpr.CsvFormat.V2_1:
            spec = tpr.ArchitectureSpec.from_df(
                df, arch or tpr.ArchitectureSpec._get_arch_name_from_df(df))
        else:
            spec = tpr.ArchitectureSpec.from_name(arch)
    except ValueError as exc:  # an architecture tt-perf-report does not know
        raise OpatlasError(f"tt-perf-report cannot analyse this profile: {exc}") from None
    written = _written_arch(df)
    peaks = (f"{spec.name}'s peaks ({spec.worker_cores} worker cores, "
             f"{spec.dram_bandwidth_gb_s:g} GB/s DRAM)")
    if arch is None and written is None:
        why = ("its DEVICE ARCH column is blank" if "DEVICE ARCH" in df.columns
               else "it has no DEVICE ARCH column")
        said = f"{path} does not say which chip it was recorded on ({why})"
        return fmt, spec, [f"{said}: tt-perf-report's default chip is assumed, {peaks}; name "
                           f"the chip with --device ({known_archs(tpr)})"], [
            f"{said}; --strict does not assume one ({spec.name}): name it with --device "
            f"({known_archs(tpr)})"]
    if arch is not None and written is not None and (_arch_name(tpr, written) or
                                                     written.lower()) != spec.name:
        return fmt, spec, [f"{path} was recorded on {written} (its DEVICE ARCH); {peaks} "
                           f"are used, as --device {arch} asks"], []
    return fmt, spec, [], []


def _run(tpr: Any, path: Path, df: pd.DataFrame, w: Window, strict: bool) -> Report:
    fmt, spec, arch_notes, arch_refusals = _arch_spec(tpr, path, df, w.arch)
    df["ORIGINAL_ROW"] = df.index + 2
    if "HOST START TS" in df.columns and not w.tracing_mode:
        # as numbers: a cell that is not one (said below) sorts last, not the column as text
        df = df.sort_values(by="HOST START TS", key=_as_numbers)
    signposts = df.loc[df["OP TYPE"] == "signpost", "OP CODE"].astype(str).tolist()
    sel, window, notes = _select(tpr, path, df, w, signposts, strict)
    cell_notes = unusable_cells(path, sel)
    sel = sel.assign(**{"DEVICE ID": device_ids(sel["DEVICE ID"])})
    devices = sorted(int(d) for d in sel["DEVICE ID"].dropna().unique())
    # tt-perf-report merges whenever a device is named; with one device the merge returns the
    # same rows in the same order, so it is skipped (the totals test checks they agree)
    merged_df = tpr.merge_device_rows(sel) if len(devices) > 1 else sel
    merged = analyze_rows(tpr, merged_df, fmt, spec, path)
    per_device: dict[Any, list[dict[str, Any]]] = {}
    lone = sel["DEVICE ID"].isna() & (sel["OP TYPE"] != "signpost")
    if len(devices) == 1 and not lone.any():
        per_device[devices[0]] = merged
    else:
        for d in devices:
            per_device[d] = analyze_rows(tpr, sel[sel["DEVICE ID"] == d], fmt, spec, path)
        if lone.any():
            per_device["host"] = analyze_rows(tpr, sel[lone], fmt, spec, path)
    refusals = [f"{n}; --strict refuses a profile with cells it cannot use" for n in cell_notes]
    return Report(path, spec, spec.name, spec.worker_cores, fmt, window, signposts, devices,
                  per_device, merged, [*notes, *arch_notes, *cell_notes],
                  [*refusals, *arch_refusals])


def _as_numbers(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col, errors="coerce")


def device_ids(col: pd.Series) -> pd.Series:
    """DEVICE ID as numbers, as tt-perf-report's get_int reads it: a whole number from 0, else
    NaN (no device: its row is grouped as 'host'), not -1 or 1.5 as a device of its own."""
    ids = _as_numbers(col)
    return ids.where((ids >= 0) & (ids % 1 == 0) & (ids != float("inf")))


# ---------------------------------------------------------------- cells it cannot use

SHOWN_CELLS = 3  # cells a note names before it counts the rest
_DIM = re.compile(r"^(?:INPUT|OUTPUT)_\d+_[WZYX](?:_PAD\[LOGICAL\])?$")


def _device_id_ok(v: Any) -> bool:
    from tt_perf_report.csv_values import whole_number

    n = whole_number(v)
    return n is not None and n >= 0


def _core_count_ok(v: Any) -> bool:
    from tt_perf_report.csv_values import core_count_from_value

    return core_count_from_value(v) is not None


def _dim_ok(v: Any) -> bool:
    """A tensor dimension cell tt-perf-report (the padded part) and opatlas (the logical
    part of a v2 'padded[logical]' cell) can both use."""
    from tt_perf_report.csv_values import tensor_dim_from_value

    if isinstance(v, str) and "[" in v and "]" in v:
        padded, logical = v.split("[")[0], v.split("[")[1].split("]")[0]
        return tensor_dim_from_value(padded) is not None and \
            tensor_dim_from_value(logical) is not None
    return tensor_dim_from_value(v) is not None


def _number_ok(v: Any) -> bool:
    from tt_perf_report.csv_values import finite_float

    return finite_float(v) is not None


# (what the cells are, their columns (None: the tensor dimension columns), the test a
# non-blank cell passes, what a cell that fails costs its row)
CELL_CHECKS: tuple[tuple[str, tuple[str, ...] | None, Any, str], ...] = (
    ("a DEVICE ID that is not a whole number from 0", ("DEVICE ID",),
     _device_id_ok, "those rows are grouped as device 'host', apart from the devices"),
    ("a CORE COUNT that is not a positive whole number", ("CORE COUNT",), _core_count_ok,
     "those rows have no Cores, FLOPs % or matmul/conv bound"),
    ("a tensor dimension that is not a positive whole number", None, _dim_ok,
     "those rows' shape-based figures (tt-perf-report's FLOPs and DRAM, opatlas's bound) "
     "are left out"),
    ("an OP TO OP LATENCY [ns] that is not a number", ("OP TO OP LATENCY [ns]",), _number_ok,
     "those rows have no op-to-op gap"),
    ("a HOST START TS that is not a number", ("HOST START TS",), _number_ok,
     "those rows are ordered after every other"),
)


def cell_text(v: Any) -> str:
    """A cell as the CSV gives it: 'blank', a whole float without its .0, a number read as
    text (its column holds text elsewhere) as it is, other text quoted."""
    from tt_perf_report.csv_values import finite_float

    if _blank(v):
        return "blank"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, str) and finite_float(v) is None:
        return repr(v)
    return str(v).strip()


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v) or (isinstance(v, str)
                                                               and not v.strip())


def unusable_cells(path: Path, df: pd.DataFrame) -> list[str]:
    """One note per kind of cell the operations analysed (signposts aside) hold but neither
    tt-perf-report nor opatlas can use — each naming its first lines, columns and values,
    then a count — where the row would otherwise quietly lose a figure."""
    ops = df[df["OP TYPE"] != "signpost"]
    notes = []
    for what, columns, ok, cost in CELL_CHECKS:
        cols = [c for c in ops.columns if _DIM.match(str(c))] if columns is None else [
            c for c in columns if c in ops.columns]
        bad: list[tuple[int, str, Any]] = []
        for c in cols:
            given = ops[c].dropna()  # pandas reads an empty field as NaN
            fails = {v for v in pd.unique(given) if not _blank(v) and not ok(v)}
            if fails:
                hit = given[given.isin(fails)]
                lines = ops.loc[hit.index, "ORIGINAL_ROW"].astype(int).tolist()
                bad += [(line, c, v) for line, v in zip(lines, hit.tolist(), strict=True)]
        if not bad:
            continue
        bad.sort(key=lambda b: b[0])
        rows = len({b[0] for b in bad})
        shown = "; ".join(f"line {line}: {c} {cell_text(v)}" for line, c, v in
                          bad[:SHOWN_CELLS])
        more = f"; {len(bad) - SHOWN_CELLS} more cell(s)" if len(bad) > SHOWN_CELLS else ""
        notes.append(f"{path}: {rows} row(s) with {what} ({shown}{more}): {cost}")
    return notes


def _select(tpr: Any, path: Path, df: pd.DataFrame, w: Window, signposts: list[str],
            strict: bool) -> tuple[pd.DataFrame, str, list[str]]:
    """tt-perf-report's signpost window: (rows, its description, notes)."""
    if w.ignore_signposts and (w.start_signpost or w.end_signpost):
        raise OpatlasError("--ignore-signposts analyses the whole file: give it or a "
                           "--start-signpost / --end-signpost window, not both")
    for name in (w.start_signpost, w.end_signpost):
        if name is not None and name not in signposts:
            known = ", ".join(dict.fromkeys(signposts)) or "none"
            raise OpatlasError(f"{path} has no signpost {name!r} (its signposts: {known})")
    if df[df["OP TYPE"] != "signpost"].empty:
        raise OpatlasError(f"{path} holds no device operation (signposts only, or no row): "
                           f"nothing to analyse")
    sel = tpr.filter_by_signpost(df, w.start_signpost, w.end_signpost, w.ignore_signposts, False)
    named = bool(w.start_signpost or w.end_signpost)
    if named and sel[sel["OP TYPE"] != "signpost"].empty:
        # the window the user named selects nothing: an error, as an empty store is (the
        # default window falls back to the whole file below, said in a note)
        raise OpatlasError(f"{path}: no device operation {_window_text(w, signposts)}"
                           f"{_empty_window_why(df, w)}; name another --start-signpost/"
                           f"--end-signpost, or give --ignore-signposts")
    if not sel.empty or named:
        return sel, _window_text(w, signposts), []
    empty = (f"{path}: nothing follows the last signpost {signposts[-1]!r}, the window "
             f"tt-perf-report analyses by default")
    msg = (f"{empty}; analysing the whole file instead (tt-perf-report --ignore-signposts). "
           f"Name a range with start/end signposts.")
    if strict:
        raise OpatlasError(f"{empty}. Name a range with --start-signpost/--end-signpost, or "
                           f"give --ignore-signposts (--strict does not fall back to the "
                           f"whole file)")
    return (tpr.filter_by_signpost(df, None, None, True, False),
            "whole file (signposts ignored)", [msg])  # the CLI says notes on stderr


def _empty_window_why(df: pd.DataFrame, w: Window) -> str:
    """Why a window bounded by two signposts holds no device operation: the end signpost (the
    occurrence filter_by_signpost takes) comes before the start one, or nothing but
    signposts lies between them; "" for a window open at one end. Their order is that of the
    rows' labels, which filter_by_signpost compares."""
    if not (w.start_signpost and w.end_signpost):
        return ""
    marks = df[df["OP TYPE"] == "signpost"]
    starts = marks.index[marks["OP CODE"] == w.start_signpost]
    ends = marks.index[marks["OP CODE"] == w.end_signpost]
    nth = 1 if w.end_signpost == w.start_signpost else 0
    if nth >= len(ends):  # no end occurrence left: the window runs to the end of the file
        return ""
    start, end = starts[0], ends[nth]
    if end < start:
        return " (the end signpost comes before the start one in the file)"
    between = int(((marks.index > start) & (marks.index < end)).sum())
    return (f" (only {between} signpost(s) lie between them)" if between
            else " (the two signposts are adjacent: no device operation lies between them)")


def _window_text(w: Window, signposts: list[str]) -> str:
    """The window as tt-perf-report's filter_by_signpost selects it: a named signpost is its
    first occurrence (an end equal to the start: the second), and the default window starts
    after the first signpost bearing the last signpost's name."""
    if w.ignore_signposts or not signposts:
        return "whole file" + (" (signposts ignored)" if signposts else "")
    if w.start_signpost or w.end_signpost:
        start = (f"after {_occurrence(w.start_signpost, 0, signposts)}" if w.start_signpost
                 else "from the start")
        nth = 1 if w.end_signpost == w.start_signpost else 0
        end = (f"until {_occurrence(w.end_signpost, nth, signposts)}"
               if w.end_signpost and nth < signposts.count(w.end_signpost) else "to the end")
        return f"{start} {end}"
    last = signposts[-1]
    if signposts.count(last) == 1:
        return f"after the last signpost {last!r}"
    return (f"after {_occurrence(last, 0, signposts)} (the last signpost's name: "
            f"tt-perf-report starts at its first)")


def _occurrence(name: str, nth: int, signposts: list[str]) -> str:
    """A signpost as the window uses it: its name where it occurs once, else which one."""
    count = signposts.count(name)
    return repr(name) if count == 1 else f"the {('first', 'second')[nth]} of {count} {name!r}"


def analyze_rows(tpr: Any, df: pd.DataFrame, fmt: Any, spec: Any,
                 path: Path | None = None) -> list[dict[str, Any]]:
    """tt-perf-report's per-row loop (generate_perf_report): analyze_op with the previous
    non-signpost row, ids, categories, then its derived columns (Total %, Bound). Rows go in
    as dicts, not pandas Series: its readers only index and test membership, and a Series per
    row made this loop ten times slower. A row analyze_op cannot analyse (a MATH FIDELITY it
    does not know, a blank cell it reads as text) is an error naming the row."""
    rows = []
    prev, prev_invalid = None, None
    for row in records(df):
        try:
            op, _gap = tpr.analyze_op(row, prev, fmt, spec, None,
                                      prev_row_invalid_duration=prev_invalid)
        except (ValueError, AssertionError, TypeError, AttributeError, KeyError) as exc:
            raise row_error(path, row, exc) from None
        op["ID"] = tpr.Cell(row["ORIGINAL_ROW"])
        op["Global Call Count"] = tpr.Cell(row["GLOBAL CALL COUNT"])
        op["Raw OP Code"] = tpr.Cell(row["OP CODE"])
        op[RAW] = row
        if "signpost" in str(row["OP TYPE"]):
            op["OP Code"].raw_value = f"{row['OP CODE']} (signpost)"
            op["Device Time"].raw_value = None
        else:
            prev, prev_invalid = row, op["Invalid Device Duration"].raw_value
            op["Op Category"] = tpr.Cell(tpr.classify_operation(op["OP Code"].raw_value))
        rows.append(op)
    tpr.add_derived_columns(rows)
    return rows


FIDELITIES = ("HiFi4", "HiFi3", "HiFi2", "LoFi")  # ArchitectureSpec.tflops_per_core's
TEXT_CELLS = ("INPUT_0_MEMORY", "INPUT_1_MEMORY", "OUTPUT_0_MEMORY")  # read as text (matmul, conv)


def row_error(path: Path | None, row: dict[str, Any], exc: Exception) -> OpatlasError:
    """The error for a row tt-perf-report's analyze_op fails on: the file, the CSV line, the
    op, and the column and value at fault where they can be told."""
    line = row.get("ORIGINAL_ROW")
    where = (f"{path or 'the CSV'}: line {cell_text(line)} ({row.get('OP CODE')})")
    if "math fidelity" in str(exc).lower():
        return OpatlasError(f"{where}: MATH FIDELITY {cell_text(row.get('MATH FIDELITY'))} is "
                            f"not a fidelity tt-perf-report knows ({', '.join(FIDELITIES)}); "
                            f"it rates the op's FLOPs at its fidelity")
    if isinstance(exc, KeyError):
        return OpatlasError(f"{where}: the header lacks {exc.args[0]}, which tt-perf-report "
                            f"reads for this op")
    blank = [c for c in TEXT_CELLS if c in row and not isinstance(row[c], str)]
    if blank and isinstance(exc, (TypeError, AttributeError)):
        return OpatlasError(f"{where}: tt-perf-report cannot analyse this op: "
                            f"{', '.join(blank)} {'is' if len(blank) == 1 else 'are'} blank")
    return OpatlasError(f"{where}: tt-perf-report cannot analyse this row "
                        f"({type(exc).__name__}: {exc})")


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as dicts; the same values as ``df.to_dict("records")`` three times faster on
    pandas' Arrow-backed string columns (one ``tolist`` per column, not per cell)."""
    cols = list(df.columns)
    return [dict(zip(cols, vals, strict=True))
            for vals in zip(*(df[c].tolist() for c in cols), strict=True)]


def totals(tpr: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals line of tt-perf-report's table, and its op-to-op gap advice; its DRAM % and
    the share of the time tracing could save as fractions (0.25 is 25 %), as the rows give
    tt-perf-report's percents and every analyze source gives a ratio."""
    dev = [r["Device Time"].raw_value for r in rows if r["Device Time"].raw_value is not None]
    gaps = [r["Op-to-Op Gap"].raw_value for r in rows if r["Op-to-Op Gap"].raw_value is not None]
    host = sum(1 for r in rows if tpr.is_host_op(r))
    sign = sum(1 for r in rows if tpr.is_signpost_op(r))
    speed, pct = tpr.calculate_overall_dram_roofline(rows)
    high = [g for g in gaps if g > HIGH_GAP_US]
    saved = sum(g - GAP_FLOOR_US for g in high)
    total = sum(dev) + sum(gaps)
    return {"device_ops": len(rows) - host - sign, "host_ops": host, "signposts": sign,
            "device_time_us": sum(dev), "op_to_op_gap_us": sum(gaps),
            "total_us": total, "dram_gbs": speed, "dram_util": None if pct is None else pct / 100,
            "high_gap_ops": len(high), "tracing_could_save_us": saved,
            "tracing_could_save_share": saved / total if total else None}


# ---------------------------------------------------------------- opatlas's own bounds

def matmul_dims(tpr: Any, raw: pd.Series, fmt: Any) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of a matmul row, read with tt-perf-report's cell readers."""
    try:
        vals = [tpr.get_tensor_dim(raw, p, k, fmt) for p in ("INPUT_0", "INPUT_1")
                for k in ("W", "Z", "Y", "X")]
    except KeyError:
        return None
    if any(v is None for v in vals):
        return None
    w0, z0, y0, x0, w1, z1, _y1, x1 = vals
    return max(w0, w1) * max(z0, z1), y0, x0, x1


def conv_gemm(tpr: Any, raw: dict[str, Any], fmt: Any) -> tuple[int, int, int] | None:
    """(M, K, N) of a conv row's implicit GEMM, read as tt-perf-report's ``analyze_conv``
    reads it: M = the output's N·H·W (OUTPUT_0 Y), K = input channels × window (INPUT_0 X ×
    window_hw), N = output channels (the weights' INPUT_1 X); None where a cell is missing."""
    try:
        dims = [tpr.get_tensor_dim(raw, p, k, fmt)
                for p, k in (("OUTPUT_0", "Y"), ("INPUT_0", "X"), ("INPUT_1", "X"))]
    except KeyError:
        return None
    attrs = raw.get("ATTRIBUTES")
    window = tpr.get_conv_window_hw(attrs if isinstance(attrs, str) else "")
    if window is None or any(d is None for d in dims):
        return None
    nhw, c_in, c_out = dims
    return nhw, c_in * window[0] * window[1], c_out


@cache
def orojenesis_bound(batch: int, m: int, k: int, n: int, word_bytes: int, onchip_bytes: int,
                     peak_flops: float, dram_bytes_per_s: float) -> tuple[float, float, str]:
    """(bound seconds, minimum DRAM bytes, bottleneck) of a (batched) GEMM whose buffer is the
    L1 of the cores it runs on."""
    from opatlas.bounds.einsum import bmm, gemm
    from opatlas.bounds.roofline import einsum_roofline

    e = gemm(m, k, n, word_bytes) if batch == 1 else bmm(batch, m, k, n, word_bytes)
    rb = einsum_roofline(e, onchip_bytes, peak_flops, dram_bytes_per_s)
    return rb.time_s, rb.bytes, rb.bottleneck


_GRID = re.compile(r"grid=\{\[\(x=(\d+);y=(\d+)\) - \(x=(\d+);y=(\d+)\)\]\}")
_ATTR = re.compile(r"'([\w.]+)': '([^']*)'")  # {'key': 'value'; ...} of ATTRIBUTES
_LAYOUT = re.compile(r"memory_layout=TensorMemoryLayout::(\w+)")
_SIM_DTYPES = {"BFLOAT16": "bfloat16", "BFLOAT8_B": "bfloat8_b", "FLOAT32": "float32"}


def _memory_config(text: str) -> tuple[str, tuple[int, int] | None]:
    """(layout, grid as columns x rows) of a MemoryConfig(...) string; one grid range only."""
    lay = _LAYOUT.search(text)
    grids = _GRID.findall(text)
    grid = None
    if len(grids) == 1:
        x0, y0, x1, y1 = (int(v) for v in grids[0])
        grid = (x1 - x0 + 1, y1 - y0 + 1)
    return (lay.group(1) if lay else ""), grid


def simulate_reshard_ns(ht: int, wt: int, gin: tuple[int, int], sin: str, gout: tuple[int, int],
                        sout: str, dtype: str) -> float | None:
    """The calibrated Wormhole reshard simulator's time for one reshard of ``ht`` × ``wt``
    tiles, or None where the tensor does not shard evenly on those grids."""
    from opatlas.errors import InvalidShape
    from opatlas.tenstorrent.sim import reshard_time_ns

    try:
        return reshard_time_ns((ht * 32, wt * 32), gin, sin, gout, sout, dtype)
    except InvalidShape:
        return None


def reshard_bound(raw: pd.Series, fmt: Any, tpr: Any) -> tuple[float | None, str]:
    """The simulator's prediction for a reshard-family row (an estimate, not its bound: that
    is its DRAM traffic, dram_traffic), or why it is not comparable."""
    code = str(raw["OP CODE"])
    in_mem, out_mem = str(raw.get("INPUT_0_MEMORY", "")), str(raw.get("OUTPUT_0_MEMORY", ""))
    attrs = str(raw.get("ATTRIBUTES", ""))
    if code != "ReshardDeviceOperation":
        return None, ("not comparable: the simulator models sharded L1 -> sharded L1 reshards, "
                      f"this op moves {in_mem} -> {out_mem}")
    if "L1" not in in_mem or "L1" not in out_mem:
        return None, f"not comparable: {in_mem} -> {out_mem} is not L1 to L1"
    if str(raw.get("INPUT_0_LAYOUT", "")) != "TILE":
        return None, "not comparable: the simulator models TILE layout"
    dtype = _SIM_DTYPES.get(str(raw.get("INPUT_0_DATATYPE", "")))
    if dtype is None:
        return None, f"not comparable: dtype {raw.get('INPUT_0_DATATYPE')} not simulated"
    configs = {k: v for k, v in _ATTR.findall(attrs) if v.startswith("MemoryConfig(")}
    out_cfg = [v for k, v in configs.items() if k.startswith("output")]
    in_cfg = [v for k, v in configs.items() if not k.startswith("output")]
    if not out_cfg or not in_cfg:
        return None, ("not comparable: the row's attributes do not give the input's shard grid "
                      "(only the output memory config)")
    (lin, gin), (lout, gout) = _memory_config(in_cfg[0]), _memory_config(out_cfg[0])
    sin, sout = lin.replace("_SHARDED", ""), lout.replace("_SHARDED", "")
    if gin is None or gout is None or sin not in ("BLOCK", "WIDTH", "HEIGHT") or sout not in (
            "BLOCK", "WIDTH", "HEIGHT"):
        return None, "not comparable: shard grids are not single rectangles"
    dims = [tpr.get_tensor_dim(raw, "INPUT_0", k, fmt) for k in ("W", "Z", "Y", "X")]
    if any(v is None for v in dims) or (dims[0] * dims[1] * dims[2]) % 32 or dims[3] % 32:
        return None, "not comparable: the shape is not whole tiles"
    ht, wt = dims[0] * dims[1] * dims[2] // 32, dims[3] // 32
    ns = simulate_reshard_ns(ht, wt, gin, sin, gout, sout, dtype)
    if ns is None:
        return None, "not comparable: the tensor does not shard evenly in whole tiles on these grids"
    return ns, "wormhole-sim"


# ---------------------------------------------------------------- least DRAM traffic

TILE = 32
# bytes per 32x32 tile of the block-float formats: 1024 mantissas (1 B, or 4 bits for
# bfloat4_b) and 64 shared exponents, one per 16 values (tt-metal's tile_size(DataFormat))
BLOCK_TILE_BYTES = {"BFLOAT8_B": 1088, "BFLOAT4_B": 576}
ELEMENT_BYTES = {"FLOAT32": 4, "UINT32": 4, "INT32": 4, "BFLOAT16": 2, "UINT16": 2, "UINT8": 1}
# operands an op reads or writes only in part, left out of its least traffic: a slice reads
# the part of its input it keeps, grid sample gathers from its input; a move's INPUT_1 is its
# preallocated output (counted once, as OUTPUT_0)
PARTIAL_OPERANDS = {"SliceDeviceOperation": ("INPUT_0",),
                    "PaddedSliceDeviceOperation": ("INPUT_0",),
                    "GridSample": ("INPUT_0",),
                    "MoveDeviceOperation": ("INPUT_1",)}
# ops that write into part of an existing tensor, gather rows of one, or read only the active
# experts' weights (a sparse matmul): what they move is not their tensors' sizes, so they get
# no traffic bound
PARTIAL_OPS = ("SliceWrite", "UpdateCache", "FillCache", "Embedding", "Gather", "Scatter",
               "IndexSelect", "Sparse")
NO_BOUND_L1 = "no bound: its tensors are all in L1 (no DRAM traffic to count)"
NO_BOUND_PARTIAL = "no bound: an op of its kind reads or writes only part of a tensor"
NO_BOUND_UNSIZED = "no bound: an operand opatlas cannot size"
NO_BOUND_IN_PART = "no bound: its only DRAM tensors are read or written in part"
_OPERAND = re.compile(r"^((?:INPUT|OUTPUT)_\d+)_MEMORY$")


@dataclass(frozen=True)
class Traffic:
    """The least DRAM traffic of one row: its DRAM tensors read (inputs) or written
    (outputs) once each."""
    bytes: int
    read: tuple[str, ...]
    written: tuple[str, ...]
    left_out: tuple[str, ...] = ()

    def text(self, dram_gb_s: float) -> str:
        """What the bound counts, as the row's "bound from" says it."""
        parts = [f"{', '.join(names)} {verb} once" for names, verb in
                 ((self.read, "read"), (self.written, "written")) if names]
        left = (f"; {', '.join(self.left_out)} left out (touched in part)"
                if self.left_out else "")
        return (f"DRAM traffic: {' + '.join(parts)} = {self.bytes:,} B at {dram_gb_s:g} GB/s"
                f"{left}")


def tensor_bytes(dims: tuple[int, int, int, int], layout: str, dtype: str) -> int | None:
    """Bytes of a W x Z x Y x X tensor as the device stores it: TILE layout pads Y and X to
    whole 32x32 tiles (a bfloat8_b tile is 1088 B, a bfloat4_b one 576 B), ROW_MAJOR is the
    elements at their size; None for a layout or dtype it cannot size."""
    w, z, y, x = dims
    dtype = dtype.removeprefix("DataType::").upper()
    if layout.removeprefix("Layout::").upper() == "TILE":
        per_tile = BLOCK_TILE_BYTES.get(dtype) or TILE * TILE * ELEMENT_BYTES.get(dtype, 0)
        tiles = w * z * -(-y // TILE) * -(-x // TILE)
        return tiles * per_tile if per_tile else None
    if layout.removeprefix("Layout::").upper() == "ROW_MAJOR" and dtype in ELEMENT_BYTES:
        return w * z * y * x * ELEMENT_BYTES[dtype]
    return None


def operand_bytes(raw: dict[str, Any], name: str, fmt: Any, tpr: Any) -> int | None:
    """An operand's bytes from its logical shape (the [logical] part of a v2 cell), layout and
    dtype cells; None where one is missing or unreadable."""
    try:
        dims = [tpr.get_value_physical_logical(raw[tpr.get_column_name(f"{name}_{k}", fmt)],
                                               False) for k in ("W", "Z", "Y", "X")]
    except KeyError:
        return None
    layout, dtype = raw.get(f"{name}_LAYOUT"), raw.get(f"{name}_DATATYPE")
    if any(d is None for d in dims) or not isinstance(layout, str) or not isinstance(dtype, str):
        return None
    w, z, y, x = (int(d) for d in dims)
    return tensor_bytes((w, z, y, x), layout, dtype)


def operands(raw: dict[str, Any]) -> list[str]:
    """The row's tensors (INPUT_0 ... OUTPUT_0): those whose memory cell says where they are."""
    names = [m.group(1) for m in map(_OPERAND.match, raw) if m]
    return [n for n in names if isinstance(raw.get(f"{n}_MEMORY"), str)
            and raw[f"{n}_MEMORY"].strip()]


def dram_traffic(raw: dict[str, Any], fmt: Any, tpr: Any) -> tuple[Traffic | None, str]:
    """The row's least DRAM traffic — its DRAM inputs read once plus its DRAM outputs written
    once — where every tensor is known (in L1, or in DRAM with a shape, layout and dtype);
    else (None, why there is no bound)."""
    code = str(raw.get("OP CODE", ""))
    if any(p in code for p in PARTIAL_OPS):
        return None, NO_BOUND_PARTIAL
    skip = PARTIAL_OPERANDS.get(code, ())
    total, read, written, left = 0, [], [], []
    for name in operands(raw):
        memory = str(raw[f"{name}_MEMORY"])
        if name in skip:
            left += [name] if "DRAM" in memory else []
        elif "DRAM" in memory:
            size = operand_bytes(raw, name, fmt, tpr)
            if size is None:
                cells = [raw.get(f"{name}_{k}") for k in ("LAYOUT", "DATATYPE")]
                layout, dtype = (c if isinstance(c, str) and c else "missing" for c in cells)
                return None, (f"{NO_BOUND_UNSIZED} ({name} in DRAM: its shape, layout {layout} or "
                              f"dtype {dtype} unreadable)")
            total += size
            (written if name.startswith("OUTPUT") else read).append(name)
        elif "L1" not in memory:
            return None, f"{NO_BOUND_UNSIZED} ({name} memory {memory}: neither DRAM nor L1)"
    if not (read or written):
        return None, f"{NO_BOUND_IN_PART} ({', '.join(left)})" if left else NO_BOUND_L1
    if total <= 0:
        return None, f"{NO_BOUND_UNSIZED} (its DRAM tensors are empty)"
    return Traffic(total, tuple(read), tuple(written), tuple(left)), ""
