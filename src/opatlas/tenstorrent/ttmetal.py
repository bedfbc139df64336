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
import io
import re
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


def read_csv(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, low_memory=False)
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
    df["DEVICE ID"] = pd.to_numeric(df["DEVICE ID"], errors="coerce")
    return df


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


def _arch_spec(tpr: Any, df: pd.DataFrame, arch: str | None) -> tuple[Any, Any]:
    """The CSV's format and tt-perf-report's architecture (from the file in v2.1)."""
    fmt = tpr.detect_csv_format(df)
    try:
        if fmt == tpr.CsvFormat.V2_1:
            arch = arch or tpr.ArchitectureSpec._get_arch_name_from_df(df)
            return fmt, tpr.ArchitectureSpec.from_df(df, arch)
        return fmt, tpr.ArchitectureSpec.from_name(arch)
    except ValueError as exc:  # an architecture tt-perf-report does not know
        raise OpatlasError(f"tt-perf-report cannot analyse this profile: {exc}") from None


def _run(tpr: Any, path: Path, df: pd.DataFrame, w: Window, strict: bool) -> Report:
    fmt, spec = _arch_spec(tpr, df, w.arch)
    df["ORIGINAL_ROW"] = df.index + 2
    if "HOST START TS" in df.columns and not w.tracing_mode:
        df = df.sort_values(by="HOST START TS")
    signposts = df.loc[df["OP TYPE"] == "signpost", "OP CODE"].astype(str).tolist()
    sel, window, notes = _select(tpr, path, df, w, signposts, strict)
    devices = sorted(int(d) for d in sel["DEVICE ID"].dropna().unique())
    # tt-perf-report merges whenever a device is named; with one device the merge returns the
    # same rows in the same order, so it is skipped (the totals test checks they agree)
    merged_df = tpr.merge_device_rows(sel) if len(devices) > 1 else sel
    merged = analyze_rows(tpr, merged_df, fmt, spec)
    per_device: dict[Any, list[dict[str, Any]]] = {}
    lone = sel["DEVICE ID"].isna() & (sel["OP TYPE"] != "signpost")
    if len(devices) == 1 and not lone.any():
        per_device[devices[0]] = merged
    else:
        for d in devices:
            per_device[d] = analyze_rows(tpr, sel[sel["DEVICE ID"] == d], fmt, spec)
        if lone.any():
            per_device["host"] = analyze_rows(tpr, sel[lone], fmt, spec)
    return Report(path, spec, spec.name, spec.worker_cores, fmt, window, signposts, devices,
                  per_device, merged, notes)


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


def analyze_rows(tpr: Any, df: pd.DataFrame, fmt: Any, spec: Any) -> list[dict[str, Any]]:
    """tt-perf-report's per-row loop (generate_perf_report): analyze_op with the previous
    non-signpost row, ids, categories, then its derived columns (Total %, Bound). Rows go in
    as dicts, not pandas Series: its readers only index and test membership, and a Series per
    row made this loop ten times slower."""
    rows = []
    prev, prev_invalid = None, None
    for row in records(df):
        op, _gap = tpr.analyze_op(row, prev, fmt, spec, None, prev_row_invalid_duration=prev_invalid)
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
