"""A PyBuda run folder read as PyBuda's perf analyzer reads it (shared/specs/tenstorrent.md
§B.1–B.3): the netlist, the backend perf analyzer's per-epoch ``graph_perf_report.csv``, PyBuda's
``op_perf.csv`` (its own cycle estimates) and ``balancer_score.csv``; per op, per epoch and for
the model, the figures of §B.2.

One deliberate difference: the original picks each epoch's slowest op with
``max(..., key=lambda d: d.get('bw_kernel'))`` — a display-column name that is not a data key,
so every op compares equal and the *first* op wins. Here the slowest op is the one with the
largest bandwidth-bound time (``bw_bound_single_runtime``), which is what the summary's
"pipeline cycles" are meant to be."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opatlas.errors import OpatlasError
from opatlas.tenstorrent.netlist import Netlist, NetOp, load_netlist

PERF_COLUMNS = ("op_name", "first_to_last_input", "kernel_total_runtime", "bw_bound_total_runtime",
                "kernel_math_utilization", "bw_bound_math_utilization", "output_pipe_bw_0",
                "required_output_pipe_bw_0")
OP_PERF_COLUMNS = ("name", "cycles", "limiter_cycles", "tiles")
MAX_PIPES = 8
# the report's numeric cells (N/A and blanks read as 0, as the analyzer reads them); the run
# times must not be negative: a time per input is divided out of them
PERF_NUMBERS = (*PERF_COLUMNS[2:], *(f"input_pipe_bw_{i}" for i in range(MAX_PIPES)),
                *(f"required_input_bw_{i}" for i in range(MAX_PIPES)))
PERF_TIMES = ("kernel_total_runtime", "bw_bound_total_runtime")
# math utilizations, percents: anything outside 0..100 is no utilization (said, by cell)
PERF_UTILS = ("kernel_math_utilization", "bw_bound_math_utilization")
SHOWN_CELLS = 5  # the bad cells a note names before "..."


def as_float(value: Any, default: float = 0.0) -> float:
    """The analyzer's parse: 'N/A' and blanks read as ``default``."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "N/A")):
        return default
    return float(value)


def cell_number(path: Path, line: int, column: str, value: Any,
                blank: float | None = 0.0) -> float:
    """A CSV cell as a finite number, else one line naming the file, line, column and value;
    ``blank`` is what 'N/A' and blanks read as (None: they are refused too)."""
    try:
        x = as_float(value, math.nan if blank is None else blank)
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        shown = value.strip() if isinstance(value, str) else value
        raise OpatlasError(f"{path} line {line}, column {column}: {shown!r} is not a number")
    return x


def gb_per_s(clock_hz: float, bytes_per_cycle: float) -> float:
    return bytes_per_cycle * clock_hz / 1e9


def trunc(x: float, decimals: int) -> float:
    """int(10**d · x) / 10**d, the analyzer's rounding toward zero."""
    f = 10 ** decimals
    return int(f * x) / f


# ---------------------------------------------------------------- finding the files

def find_netlist(folder: Path) -> Path:
    """The single ``*netlist.yaml`` of a run folder (or of its tt_build/test_out)."""
    if not folder.is_dir():
        raise OpatlasError(f"{folder}: no such folder")
    for where in (folder, folder / "tt_build" / "test_out"):
        found = sorted(where.glob("*netlist.yaml")) if where.is_dir() else []
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise OpatlasError(f"{where} holds {len(found)} netlists ({names}); PyBuda's perf "
                               f"analyzer reads one. Name it with -n/--netlist.")
    raise OpatlasError(f"{folder} holds no PyBuda netlist (*netlist.yaml), nor does its "
                       f"tt_build/test_out. Give the netlist with -n/--netlist, or the run's "
                       f"folder with -d/--dir.")


def graph_perf_path(folder: Path, graph: str, spatial: int, temporal: int) -> Path | None:
    base = folder / "perf_results" / "analyzer_results"
    for name in (graph, f"fwd_0_{spatial}_temporal_epoch_{temporal}", f"fwd_0_{spatial}"):
        p = base / name / "graph_perf_report.csv"
        if p.is_file():
            return p
    return None


def has_perf_results(folder: Path) -> bool:
    return (folder / "perf_results" / "analyzer_results").is_dir()


def _read_csv(path: Path, required: tuple[str, ...], what: str, whole_rows: bool = False
              ) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) pairs, rows keyed by stripped column names (op_perf.csv's header has
    leading spaces); the line is the file's, blank lines counted, for the errors. A row short
    of a ``required`` column (a file cut short) is refused by file and line; with
    ``whole_rows`` so is any row with fewer fields than the header, or more that are not blank
    (the backend's report writes every column of every row: a short one was cut, and its
    missing cells must not read as N/A, i.e. 0)."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in required if c not in header]
        if missing:
            raise OpatlasError(f"{path} is not a {what}: its header lacks the column(s) "
                               f"{', '.join(missing)} (found: {', '.join(header) or 'nothing'})")
        need = max(header.index(c) for c in required) + 1
        out = []
        for row in reader:
            if not row:
                continue
            n = reader.line_num
            if len(row) < (len(header) if whole_rows else need):
                raise OpatlasError(
                    f"{path} line {n}: {len(row)} field(s) where the header has "
                    f"{len(header)} (the row ends at {header[len(row) - 1]!r}): the file is "
                    f"cut short or the row damaged; its missing cells are not read as N/A")
            if whole_rows and any(c.strip() for c in row[len(header):]):
                raise OpatlasError(
                    f"{path} line {n}: {len(row)} fields where the header has {len(header)}: "
                    f"its cells do not line up with the header's columns")
            out.append((n, dict(zip(header, row, strict=False))))
        return out


def load_graph_perf(path: Path) -> list[dict[str, Any]]:
    """The report's rows, numeric cells parsed (a bad one refused by file, line and column; a
    short row by file and line) and the per-input times divided out of the totals; each row
    keeps its ``line`` for the notes (:func:`utilization_notes`)."""
    rows = _read_csv(path, PERF_COLUMNS, "backend perf analyzer report (graph_perf_report.csv)",
                     whole_rows=True)
    out = []
    for n, cells in rows:
        # N/A and blank cells read as 0, as the analyzer reads them; a short row was refused
        row: dict[str, Any] = {**cells, **{c: cell_number(path, n, c, cells.get(c))
                                           for c in PERF_NUMBERS}, "line": n}
        for col in PERF_TIMES:
            if row[col] < 0:
                raise OpatlasError(f"{path} line {n}, column {col}: {cells.get(col)!r} is "
                                   f"negative (a run time)")
        inputs = _input_count(path, n, cells.get("first_to_last_input", ""))
        row["number_of_inputs"] = inputs
        row["kernel_single_runtime"] = int(row["kernel_total_runtime"] / inputs)
        row["bw_bound_single_runtime"] = int(row["bw_bound_total_runtime"] / inputs)
        out.append(row)
    return out


def utilization_notes(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """The math utilizations (percents) outside 0..100 in a report's rows, named by file,
    line, op, column and value: none is a utilization, and the views would show them as
    they stand (480.0 %). A note, which --strict refuses."""
    bad = [f"line {r['line']}, op {r['op_name']}, {c} {r[c]:g}"
           for r in rows for c in PERF_UTILS if not 0 <= r[c] <= 100]
    if not bad:
        return []
    shown = "; ".join(bad[:SHOWN_CELLS]) + (" ..." if len(bad) > SHOWN_CELLS else "")
    return [f"{path}: {len(bad)} math utilization(s) outside 0-100 % ({shown}): no op runs "
            f"its math above 100 % or below 0, so the report is damaged or not the backend's; "
            f"shown as they stand"]


def _input_count(path: Path, line: int, span: str) -> int:
    """How many inputs 'first->last' spans; one that runs backwards is refused (it would make
    every time per input negative)."""
    try:
        first, last = (int(x) for x in span.split("->"))
    except ValueError:
        raise OpatlasError(f"{path} line {line}: first_to_last_input {span!r} is not "
                           f"'first->last'") from None
    if last < first:
        raise OpatlasError(f"{path} line {line}: first_to_last_input {span!r} runs backwards "
                           f"(last input before the first); the analyzer writes 'first->last'")
    return last - first + 1


def load_op_perf(path: Path) -> dict[str, dict[str, Any]]:
    rows = _read_csv(path, OP_PERF_COLUMNS, "PyBuda op_perf.csv")
    return {r["name"].strip(): {**r, **{c: int(cell_number(path, n, c, r[c], blank=None))
                                        for c in ("cycles", "limiter_cycles")}}
            for n, r in rows}


def load_balancer_score(path: Path) -> dict[str, float]:
    rows = _read_csv(path, ("epoch", "score"), "PyBuda balancer_score.csv")
    return {r["epoch"].strip(): cell_number(path, n, "score", r["score"], blank=None)
            for n, r in rows}


# ---------------------------------------------------------------- the analysis

@dataclass
class PerfRun:
    netlist: Netlist
    folder: Path
    spatial_epochs: bool
    epochs: list[list[dict[str, Any]]]   # per epoch, its op records, slowest first
    epoch_summary: list[dict[str, Any]]
    model_summary: dict[str, Any]
    has_estimates: bool
    files: dict[str, str] = field(default_factory=dict)
    # what the run's files leave in doubt (a netlist op without a measured row, a utilization
    # out of range): said as notes, refused under --strict
    notes: list[str] = field(default_factory=list)


def epoch_key(op: NetOp, spatial: bool) -> int:
    return op.spatial_epoch if spatial else op.temporal_epoch


def load_run(netlist_path: Path, folder: Path, spatial_epochs: bool = False) -> PerfRun:
    nl = load_netlist(netlist_path)
    files: dict[str, str] = {"netlist": str(netlist_path)}
    perf: list[list[dict[str, Any]]] = []
    notes: list[str] = []
    paths: list[Path] = []
    for e, g in enumerate(nl.graphs):
        p = graph_perf_path(folder, g, e, nl.temporal[e])
        if p is None:
            looked = dict.fromkeys([f"{g}/", f"fwd_0_{e}_temporal_epoch_{nl.temporal[e]}/",
                                    f"fwd_0_{e}/"])  # a graph may carry the folder's name
            raise OpatlasError(
                f"{folder / 'perf_results' / 'analyzer_results'} has no graph_perf_report.csv "
                f"for graph {g} (looked in {', '.join(looked)}). Run with "
                f"TT_BACKEND_PERF_ANALYZER=1, or analyse the netlist alone.")
        perf.append(load_graph_perf(p))
        paths.append(p)
        notes += utilization_notes(p, perf[-1])
    estimated: dict[str, dict[str, Any]] = {}
    scores: dict[str, float] = {}
    for name, loader in (("op_perf.csv", load_op_perf), ("balancer_score.csv",
                                                         load_balancer_score)):
        p = next((d / name for d in (folder, netlist_path.parent) if (d / name).is_file()), None)
        if p is not None:
            files[name] = str(p)
            if name == "op_perf.csv":
                estimated = loader(p)
            else:
                scores = loader(p)
    epochs = _merge(nl, perf, estimated, spatial_epochs)
    notes = [*unmeasured_notes(nl, perf, paths, spatial_epochs), *notes]
    for ops in epochs:
        _process(ops)
    summaries = [summarize_epoch(i, ops, scores, nl, spatial_epochs, bool(estimated))
                 for i, ops in enumerate(epochs)]
    model = summarize_model(summaries, scores, nl, bool(estimated))
    ordered = [sorted(ops.values(), key=lambda o: -o["bw_kernel_cycles"]) for ops in epochs]
    return PerfRun(nl, folder, spatial_epochs, ordered, summaries, model, bool(estimated), files,
                   notes)


def unmeasured_notes(nl: Netlist, perf: list[list[dict[str, Any]]], paths: list[Path],
                     spatial: bool) -> list[str]:
    """The netlist ops that their graph's perf report has no row for, by graph: the report is
    cut short or comes from another compile. Their epoch's figures leave them out (an epoch's
    time is its slowest *measured* op's), so they are said, never absorbed."""
    notes = []
    for e, rows in enumerate(perf):
        g = nl.graphs[e]
        measured = {r["op_name"] for r in rows}
        lost = [name for name in nl.ops[g] if name not in measured]
        if not lost:
            continue
        shown = ", ".join(lost[:SHOWN_CELLS]) + (" ..." if len(lost) > SHOWN_CELLS else "")
        epoch = e if spatial else nl.temporal[e]
        notes.append(f"{len(lost)} op(s) of graph {g} in {nl.path} have no row in its perf "
                     f"report {paths[e]} ({shown}): the report is cut short or from another "
                     f"run; epoch {epoch}'s time, slowest op and util leave them out")
    return notes


def _merge(nl: Netlist, perf: list[list[dict[str, Any]]], estimated: dict[str, dict[str, Any]],
           spatial: bool) -> list[dict[str, dict[str, Any]]]:
    """One record per measured op, with its netlist fields and estimates, grouped by temporal
    epoch (spatial epochs of one temporal epoch run at the same time) or by spatial epoch."""
    n_epochs = len(nl.graphs) if spatial else max(nl.temporal) + 1
    epochs: list[dict[str, dict[str, Any]]] = [{} for _ in range(n_epochs)]
    for e, rows in enumerate(perf):
        g = nl.graphs[e]
        for row in rows:
            name = row["op_name"]
            op = nl.ops[g].get(name)
            if op is None:
                raise OpatlasError(f"op {name!r} of the perf report for graph {g} is not in "
                                   f"graph {g} of the netlist {nl.path}: the two come from "
                                   f"different runs")
            if estimated and name not in estimated:
                raise OpatlasError(f"op {name!r} is measured but op_perf.csv has no estimate "
                                   f"for it: the files come from different runs")
            est = estimated.get(name)
            epochs[e if spatial else nl.temporal[e]][name] = _record(op, row, est, e, spatial)
    return epochs


def _record(op: NetOp, row: dict[str, Any], est: dict[str, Any] | None, spatial_index: int,
            spatial: bool) -> dict[str, Any]:
    ins = []
    for i in range(len(op.inputs)):
        actual = max(0.0, as_float(row.get(f"input_pipe_bw_{i}")))
        ins.append({"actual": actual, "required": as_float(row.get(f"required_input_bw_{i}")),
                    "is_dram": op.input_is_dram[i]})
    return {
        "op": op, "name": op.name, "epoch": spatial_index if spatial else op.temporal_epoch,
        "kernel_cycles": row["kernel_single_runtime"],
        "bw_kernel_cycles": row["bw_bound_single_runtime"],
        "number_of_inputs": row["number_of_inputs"],
        "util": as_float(row["kernel_math_utilization"]),
        "bw_util": as_float(row["bw_bound_math_utilization"]),
        "input_bws": ins,
        "output_bw": {"actual": as_float(row["output_pipe_bw_0"]),
                      "required": as_float(row["required_output_pipe_bw_0"]),
                      "is_dram": op.output_is_dram},
        "estimated_cycles": est["cycles"] if est else None,
        "estimated_lim_cycles": est["limiter_cycles"] if est else None,
        "tiles": est.get("tiles", "").strip() if est else None,
    }


def _process(ops: dict[str, dict[str, Any]]) -> None:
    """The bandwidth problem of each op: which pipe is furthest below what it requires."""
    for rec in ops.values():
        rec["bw_problem"] = bw_problem(rec, ops)


def bw_problem(rec: dict[str, Any], epoch_ops: dict[str, Any]) -> str:
    if rec["bw_kernel_cycles"] <= rec["kernel_cycles"]:
        return ""
    factors = [b["required"] / b["actual"] if b["actual"] > 0 else 0.0 for b in rec["input_bws"]]
    worst = max(factors, default=float("-inf"))
    out = rec["output_bw"]
    out_factor = (out["required"] / out["actual"] if out["actual"] > 0
                  else (float("inf") if out["required"] > 0 else 0.0))
    if worst > out_factor:
        i = factors.index(worst)
        return f"{'noc' if rec['op'].inputs[i] in epoch_ops else 'dram'} in{i}"
    return "output"


def summarize_epoch(epoch: int, ops: dict[str, dict[str, Any]], scores: dict[str, float],
                    nl: Netlist, spatial: bool, has_est: bool) -> dict[str, Any]:
    recs = list(ops.values())
    if not recs:
        raise OpatlasError(f"epoch {epoch} of {nl.path} has no measured op")
    slowest = max(recs, key=lambda r: r["bw_kernel_cycles"])  # first of equals, as max does
    pipeline = slowest["bw_kernel_cycles"]
    clock = nl.clock_hz
    total_cores = nl.core_count * (1 if spatial else nl.device_count)
    rate: float | None = None
    if pipeline > 0:
        rate = int(clock / pipeline) or int(100 * clock / pipeline) / 100
    # PyBuda's analyzer's epoch util: a *math* utilization (each op's bw_util, weighted by its
    # cores and its bw_kernel cycles), not the balancer's (estimated cycles over the pipeline)
    util = sum(r["op"].cores * r["bw_util"] * r["bw_kernel_cycles"] for r in recs)
    util = trunc(util / pipeline / total_cores, 1) if pipeline > 0 else 0.0
    bal: float | None = None
    if has_est:
        est_pipeline = max(r["estimated_lim_cycles"] for r in recs)
        share = (sum(r["op"].cores * r["estimated_cycles"] for r in recs) / est_pipeline
                 if est_pipeline > 0 else 0.0)
        bal = int(1000 * share / total_cores) / 10  # percent, 1 decimal
    bw = {"required_noc": 0.0, "actual_noc": 0.0, "required_dram": 0.0, "actual_dram": 0.0}
    for r in recs:
        for b in [*r["input_bws"], r["output_bw"]]:
            kind = "dram" if b["is_dram"] else "noc"
            bw[f"required_{kind}"] += b["required"]
            bw[f"actual_{kind}"] += b["actual"]
    return {
        "epoch": epoch, "slowest_op": slowest["name"],
        "pipeline_cycles": pipeline,
        "inputs_per_second": rate, "math_util": util,
        "matmul_cores": sum(r["op"].cores for r in recs if r["op"].type == "matmul"),
        "balancer_util": bal,
        **{f"{k}_bw_gbs": trunc(gb_per_s(clock, v), 1) for k, v in bw.items()},
        "sum_estimated_kernel_err": (sum(abs(r["estimated_cycles"] - r["kernel_cycles"])
                                         for r in recs) if has_est else None),
        "sum_estimated_lim_err": (sum(abs(r["estimated_lim_cycles"] - r["bw_kernel_cycles"])
                                      for r in recs) if has_est else None),
        "sum_kernel": sum(r["kernel_cycles"] for r in recs),
        "sum_kernel_bw": sum(r["bw_kernel_cycles"] for r in recs),
        "balancer_epoch_score": scores.get(str(epoch)),  # None: no score, not 0
        "ops": len(recs),
    }


def summarize_model(epochs: list[dict[str, Any]], scores: dict[str, float], nl: Netlist,
                    has_est: bool) -> dict[str, Any]:
    cycles = sum(e["pipeline_cycles"] for e in epochs)
    if cycles <= 0:
        raise OpatlasError(f"the perf reports of {nl.path} give every epoch 0 cycles")
    kernel = sum(e["sum_kernel"] for e in epochs)
    kernel_bw = sum(e["sum_kernel_bw"] for e in epochs)

    def err(key: str, total: int) -> int | None:
        if not has_est or total <= 0:
            return None
        return int(sum(e[key] for e in epochs) / float(total) * 100)

    return {
        "overall_speed": int(nl.clock_hz / cycles),
        "overall_util": trunc(sum(e["math_util"] * e["pipeline_cycles"] for e in epochs)
                              / cycles, 2),
        "balancer_solution_score": scores.get("total"),  # None without balancer_score.csv
        "kernel_estimation_error": err("sum_estimated_kernel_err", kernel),
        "kernel_bw_estimation_error": err("sum_estimated_lim_err", kernel_bw),
        "pipeline_cycles": cycles,
    }
