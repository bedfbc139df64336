"""Formatting shared by the views: a value as text by its column's unit, the highlight of a
cell by its column's role (PyBuda's colours), and the per-group summary."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from opatlas.analyze.model import Analysis, Column
from opatlas.console import fmt_si

UTIL_GOOD, UTIL_BAD = 0.50, 0.25  # utilization: green above, red below
ERROR_WARN, ERROR_BAD = 0.20, 0.50  # estimate vs measured: yellow at, red at


def missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def fmt_seconds(v: float) -> str:
    a = abs(v)
    if a >= 1:
        return f"{v:.3f} s"
    if a >= 1e-3:
        return f"{v * 1e3:.3f} ms"
    return f"{v * 1e6:.1f} µs"


# time units a cell shows as a time (12.3 µs, 1.234 ms), and their length in seconds
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
# units the cells say themselves; any other goes into the column's header (as report.js)
SAID_UNITS = {*TIME_UNITS, "%", "x", "FLOP", "B", "FLOP/s", "B/s"}


def fmt(value: Any, col: Column | None) -> str:
    """A cell as text, as the HTML report (report.js ``fmt``) shows it: a mapping as
    key=value, a list as [a, b], a time with its unit, a number without a column to 4
    figures (whole digits kept)."""
    if isinstance(value, dict | list | tuple):
        return _param(value)
    if missing(value):
        return "-"
    if isinstance(value, bool | np.bool_):  # numpy's too: a bool column's cell in a row
        return "yes" if value else "no"
    if isinstance(value, str) or (col is None and not isinstance(value, float)):
        return str(value)
    if col is None:
        return _number(value)
    unit = col.unit
    if unit in TIME_UNITS:
        return fmt_seconds(float(value) * TIME_UNITS[unit])
    if unit == "cycles":
        return f"{round(float(value)):,}"
    if unit == "%":
        return f"{100 * float(value):.1f}%"
    if unit == "x":
        return f"{float(value):.2f}x"
    if unit in ("FLOP", "B", "FLOP/s", "B/s"):
        return fmt_si(float(value), unit)
    if col.role == "count":
        v = float(value)
        return f"{v:,.0f}" if v == int(v) else f"{v:,.2f}"
    if isinstance(value, float):
        return _number(value)
    return str(value)


def _number(v: float) -> str:
    """A number of no known unit: 4 figures, but never rounding away whole digits (157415
    stays 157,415, not 1.574e+05)."""
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def _param(v: Any, nested: bool = False) -> str:
    """A shape parameter: a whole number without '.0', any other float to 4 figures; a list
    as [a, b, c], a mapping as k=v (a nested one in braces)."""
    if isinstance(v, dict):
        inner = " ".join(f"{k}={_param(x, True)}" for k, x in v.items())
        return "{" + inner + "}" if nested else inner
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_param(x, True) for x in v) + "]"
    if missing(v):
        return "-"
    if isinstance(v, float) and math.isfinite(v):
        return f"{v:.0f}" if v == int(v) and abs(v) < 1e16 else f"{v:.4g}"
    return str(v)


def header(col: Column) -> str:
    """A column's header: its label, with its unit where the cells do not say it."""
    return f"{col.label} ({col.unit})" if col.unit and col.unit not in SAID_UNITS else col.label


def highlight(value: Any, col: Column | None) -> str | None:
    """'good', 'warn' or 'bad' for a cell PyBuda would colour, else None."""
    if col is None or missing(value) or isinstance(value, str | dict | list | bool):
        return None
    v = float(value)
    if col.role == "util":
        return "good" if v > UTIL_GOOD else "bad" if v < UTIL_BAD else None
    if col.role == "error":
        return "bad" if abs(v) >= ERROR_BAD else "warn" if abs(v) >= ERROR_WARN else None
    return None


def visible_columns(analysis: Analysis) -> list[Column]:
    """The described columns the rows have (the source's order), else the required ones."""
    cols = [c for c in analysis.columns if c.key in analysis.rows.columns]
    if cols:
        return cols
    return [Column(key=k, label=k) for k in analysis.rows.columns if k != "group"]


def op_label(op: Any, pass_: Any) -> str:
    """An op and its pass as one name, without saying a word twice: "linear fwd", but
    "pipeline bubble" for the bubble (whose pass is "bubble")."""
    name = "" if missing(op) else str(op)
    p = "" if missing(pass_) else str(pass_).strip()
    if not p or p == "-" or p.lower() in name.lower().replace("_", " ").split():
        return name
    return f"{name} {p}".strip()


# a group's "util" where the source states none (tables.group_summary) is the time-weighted
# mean of its rows' util_compute: for a tt-metal profile, tt-perf-report's per-op FLOPs %
GROUP_UTIL_LABELS = {
    "ttmetal": ("FLOPs % (time-weighted)",
                "its ops' FLOPs % (tt-perf-report's: matmuls and convs) weighted by their "
                "device time; the ops without one count as 0"),
}


def group_util_label(analysis: Analysis) -> tuple[str, str] | None:
    """(label, what it means) of the per-group util, where the source says how it is made
    and does not state its own (``group_util``); the source's own words where it gives them
    (``group_util_label``: PyBuda's per-epoch math or balancer util)."""
    said = analysis.summary.get("group_util_label")
    if isinstance(said, list | tuple) and len(said) == 2:
        return str(said[0]), str(said[1])
    if analysis.summary.get("group_util"):
        return None
    return GROUP_UTIL_LABELS.get(analysis.source.kind)


def group_summary(analysis: Analysis) -> pd.DataFrame:
    """Per stage/epoch/device: time, share, slowest op, its time, utilization and the
    communication share (PyBuda's per-epoch summary). A group's time is its rows' sum unless
    the source states it (``group_times_s``: a pipelined epoch takes its slowest op's time),
    and its utilization the source's own (``group_util``) or else the time-weighted mean of
    the rows' ``util_compute`` (unknown when no row has one)."""
    rows = analysis.rows
    out = []
    total = analysis.total_time_s or 1.0
    times = analysis.summary.get("group_times_s") or {}
    utils = analysis.summary.get("group_util") or {}
    for g, sub in rows.groupby(rows["group"].astype(str), sort=False):
        summed = float(sub["time_s"].sum())
        t = float(times.get(g, summed))
        slow = sub.loc[sub["time_s"].idxmax()] if len(sub) else None
        comm = sub["limiter"].eq("communication")
        out.append({"group": g, "time_s": t, "share": t / total,
                    "slowest_op": "" if slow is None else op_label(slow["op"], slow["pass"]),
                    "slowest_time_s": 0.0 if slow is None else float(slow["time_s"]),
                    "util": _group_util(utils.get(g), sub, summed),
                    "comm_share": (float(sub.loc[comm, "time_s"].sum()) / summed
                                   if summed else 0),
                    "rows": len(sub)})
    return pd.DataFrame(out)


def time_breakdown(analysis: Analysis) -> list[tuple[str, float]]:
    """Where the time goes: seconds per category (a config's compute, tp_comm ...) or per
    limiter, largest first. With stated group times (pipelined epochs) each group's time
    goes to what limits its slowest op, the op that sets the pipeline's pace."""
    rows = analysis.rows
    key = "category" if "category" in rows else "limiter"
    labels = rows[key].astype(object).where(rows[key].notna(), "other").astype(str) \
        if key in rows else pd.Series("other", index=rows.index)
    by: dict[str, float] = {}
    times = analysis.summary.get("group_times_s") or {}
    if times:
        for g, sub in rows.groupby(rows["group"].astype(str), sort=False):
            if g in times and len(sub):
                label = labels[sub["time_s"].idxmax()]
                by[label] = by.get(label, 0.0) + float(times[g])
    else:
        for label, t in zip(labels, rows["time_s"], strict=True):
            by[label] = by.get(label, 0.0) + (0.0 if missing(t) else float(t))
    return sorted(((k, v) for k, v in by.items() if v > 0), key=lambda kv: -kv[1])


DETAIL_SKIP = {"timeline", "notes", "group_times_s", "group_util", "group_util_label",
               "percent_keys",
               "peak_flops_by_dtype"}  # the peaks card and the roofs show it
MAX_DETAIL_ROWS = 500


def detail_tables(analysis: Analysis) -> list[dict[str, Any]]:
    """The summary's tables (a list of records, a mapping of records, or one flat mapping):
    PyBuda's per-epoch summary and reblocking edges, tt-metal's per-op-code totals, top ops
    and per-device figures ... as {title, rows, total} for the report; nested values as JSON."""
    out = []
    for key, value in analysis.summary.items():
        rows = None if key in DETAIL_SKIP else _records(value)
        if rows:
            rows = _as_percents(rows, percent_columns(analysis.summary, key))
            out.append({"title": summary_label(key), "rows": rows[:MAX_DETAIL_ROWS],
                        "total": len(rows)})
    return out


# a summary table's columns named so hold fractions (tt-metal's dram_util, device_time_share):
# the report shows them as percents
FRACTION_SUFFIXES = ("_util", "_share")


def _as_percents(rows: list[dict[str, Any]], percents: set[str]) -> list[dict[str, Any]]:
    """A detail table's rows with each percent column labelled so and each fraction column
    (:data:`FRACTION_SUFFIXES`) turned into its percent: a column is renamed as a whole (its
    rows without a value keep their place under the new name), in its own position."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    fractions = {k for k in keys if k not in percents and k.endswith(FRACTION_SUFFIXES)
                 and any(_number_value(r.get(k)) for r in rows)
                 and all(missing(r.get(k)) or _number_value(r.get(k)) for r in rows)}
    names = {k: f"{k} (%)" if k in percents or k in fractions else k for k in keys}

    def cell(k: str, v: Any) -> Any:
        if k in fractions and _number_value(v) and math.isfinite(v):
            return 100.0 * v
        return v

    return [{names[k]: cell(k, v) for k, v in r.items()} for r in rows]


def _number_value(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def percent_columns(summary: dict[str, Any], table: str | None = None) -> set[str]:
    """The summary's keys (``table`` None) or a summary table's columns whose values are
    percents, not the views' fractions: ``percent_keys`` names them (PyBuda's own figures,
    2.22 for 2.22 %), "table.column" for a table's column."""
    keys = summary.get("percent_keys") or []
    if table is None:
        return {k for k in keys if "." not in k}
    return {k.split(".", 1)[1] for k in keys if k.startswith(f"{table}.")}


def _records(value: Any) -> list[dict[str, Any]] | None:
    def flat(rec: dict[str, Any]) -> dict[str, Any]:
        return {str(k): json.dumps(v) if isinstance(v, dict | list) else v
                for k, v in rec.items()}

    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return [flat(x) for x in value]
    if isinstance(value, dict) and value and all(isinstance(x, dict) for x in value.values()):
        return [{"key": str(k), **flat(x)} for k, x in value.items()]
    if isinstance(value, dict) and value and not any(isinstance(x, dict | list)
                                                     for x in value.values()):
        return [flat(value)]
    return None


def _group_util(stated: Any, sub: pd.DataFrame, summed: float) -> float:
    if stated is not None:
        return float(stated) if not missing(stated) else float("nan")
    if "util_compute" not in sub or summed <= 0:
        return float("nan")
    weighted = pd.to_numeric(sub["util_compute"], errors="coerce").mul(sub["time_s"])
    return float(weighted.sum(min_count=1) / summed)


SUMMARY_SKIP = {"timeline", "notes", "title", "throughput_unit", "utilization_label",
                "estimation_error_label", "word_bytes", "stage", "total_time_s",
                "total_time_label", "group_times_s", "group_util", "group_util_label",
                "percent_keys", "memory_stage"}  # memory_stage: said in memory_gib's label

# readable labels (with the unit where the value shows none) of the sources' summary keys
SUMMARY_LABELS = {
    "step_time_s": "step time", "predicted_step_time_s": "predicted step time",
    "samples_per_s": "samples/s",
    "peak_flops_s": "peak compute", "peak_bytes_s": "peak bandwidth",
    "onchip_bytes": "on-chip buffer", "memory_gib": "memory per GPU (GiB)",
    "fits": "fits in memory", "stages": "pipeline stages", "measurements": "measurements",
    "busy_time_s": "busy time", "time_basis": "time is", "events": "trace events",
    "clock_hz": "clock (Hz)", "core_count": "cores", "device_count": "devices",
    "epoch_kind": "epoch kind", "overall_speed": "overall speed (samples/s)",
    "pipeline_cycles": "pipeline (cycles)", "unmodelled_ops": "unmodelled ops",
    "time_per_input_s": "time per input", "opmodel_matmul_mean_error_pct":
        "op model matmul mean |error| (%)", "reblocking_edges": "reblocking edges",
    "worker_cores": "worker cores", "csv_format": "CSV format",
    "tt_perf_report": "tt-perf-report version",
    "device_time_s": "device time (devices merged, as tt-perf-report)",
    "op_to_op_gap_s": "op-to-op gaps", "dtype": "dtype",
}
# a key's suffix: the unit its value is shown in, and what its label says of the unit
_SUFFIXES = (("_flops_s", "FLOP/s", ""), ("_bytes_s", "B/s", ""), ("_per_s", "", "/s"),
             ("_bytes", "B", ""), ("_gib", "", " (GiB)"), ("_pct", "", " (%)"),
             ("_hz", "", " (Hz)"), ("_cycles", "", " (cycles)"), ("_ns", "ns", ""),
             ("_us", "us", ""), ("_s", "s", ""))


def unit_of(key: str) -> str:
    """A value's unit from its key's suffix (a summary key, a row's extra field)."""
    return next((unit for suffix, unit, _ in _SUFFIXES if key.endswith(suffix)), "")


def summary_label(key: str) -> str:
    """A summary key as a person reads it: "peak_bytes_s" -> "peak bandwidth"; keys without a
    label of their own lose their unit suffix, said in the label where the value omits it."""
    if key in SUMMARY_LABELS:
        return SUMMARY_LABELS[key]
    for suffix, _unit, said in _SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[:-len(suffix)].replace("_", " ") + said
    return key.replace("_", " ")


def _summary_value(key: str, v: Any, percents: set[str] | frozenset[str] = frozenset()) -> str:
    if key == "onchip_bytes" and (missing(v) or not isinstance(v, int | float) or v <= 0):
        return "unknown"  # an empirical device: its on-chip buffer is not known, not 0 B
    if key in percents and isinstance(v, int | float) and not missing(v):
        return f"{_number(float(v))}%"  # a percent already (PyBuda's 2.22 is 2.22 %)
    return fmt(v, Column(key=key, label=key, unit=unit_of(key), role="count"))


def summary_items(analysis: Analysis) -> list[tuple[str, str, str | None]]:
    """(label, value, highlight) of the summary: performance first, then the rest. The first
    item is the rows' total (``total_time_label`` names it: a step, a busy time ...); a time
    equal to it is not said twice."""
    s = analysis.summary
    total = analysis.total_time_s
    items: list[tuple[str, str, str | None]] = [
        (str(s.get("total_time_label") or "total time"), fmt_seconds(total), None)]
    if s.get("throughput") is not None:
        items.append(("approx. performance", f"{s['throughput']:,.0f} {s.get('throughput_unit', '/s')}",
                      None))
    if s.get("utilization") is not None:
        u = float(s["utilization"])
        items.append((s.get("utilization_label", "utilization"), f"{100 * u:.1f}%",
                      highlight(u, Column(key="u", label="u", role="util"))))
    if s.get("estimation_error") is not None:
        e = float(s["estimation_error"])
        label = str(s.get("estimation_error_label", "estimation error"))
        # an absolute value (|error|) carries no sign
        items.append((label, f"{100 * e:.1f}%" if "|" in label else f"{100 * e:+.1f}%",
                      highlight(e, Column(key="e", label="e", role="error"))))
    shown = {"total_time_s", "throughput", "utilization", "estimation_error"}
    percents = percent_columns(s)
    for k, v in s.items():
        if k in shown or k in SUMMARY_SKIP or isinstance(v, dict | list):
            continue
        if ((k.endswith("_time_s") or k == "time_per_input_s") and isinstance(v, int | float)
                and not missing(v)
                and math.isclose(float(v), total, rel_tol=1e-9, abs_tol=1e-15)):
            continue  # the total again (a step or busy time equal to the rows' sum)
        label = _memory_label(s) if k == "memory_gib" else summary_label(k)
        items.append((label, _summary_value(k, v, percents), None))
    return _distinct_total(analysis, items)


def _memory_label(s: dict[str, Any]) -> str:
    """The memory's label, naming the pipeline stage it is where there are several: the
    fullest stage's memory, which need not be the stage the rows describe."""
    label = summary_label("memory_gib")
    where, stages = s.get("memory_stage"), s.get("stages")
    if where is None or not isinstance(stages, int) or stages <= 1:
        return label
    rows = s.get("stage")
    beside = f"; the rows are stage {rows}" if rows is not None and rows != where else ""
    return f"{label}, pipeline stage {where} (the fullest{beside})"


def _distinct_total(analysis: Analysis,
                    items: list[tuple[str, str, str | None]]) -> list[tuple[str, str, str | None]]:
    """The total's card named apart from a figure of the same name, which goes beside it: a
    tt-metal run on two devices has the rows' sum over both and tt-perf-report's merged device
    time, and two cards both saying "device time" leave the reader to guess which is which."""
    label = items[0][0]
    same = [it for it in items[1:] if it[0] == label or it[0].startswith(f"{label} (")]
    if not same:
        return items
    n = len(analysis.groups())
    how = f"summed over {n} {analysis.group_label}s" if n > 1 else "the rows summed"
    rest = [it for it in items[1:] if it not in same]
    return [(f"{label} ({how})", *items[0][1:]), *same, *rest]


PLAIN_KEYS = ("id", "op", "pass", "category", "name", "group", "dtype", "calls", "time_s",
              "predicted_time_s", "measured_time_s", "error", "share", "util", "bound_time_s",
              "headroom", "limiter", "flags", "shape")  # the shape tells equal names apart
_LEFT = ("id", "group", "text", "shape")


def plain_columns(analysis: Analysis) -> list[Column]:
    """The ``PLAIN_KEYS`` columns the analysis has. The group slot takes the source's group
    column whatever its key (PyBuda's epoch, tt-metal's device); the util slot the util of
    the time shown: PyBuda's time is the bandwidth-bound kernel time, so its util there is
    ``bw_util`` (its ``util`` is the kernel's with infinite bandwidth, a shorter time)."""
    have = {c.key: c for c in visible_columns(analysis)}
    group = next((c for c in have.values() if c.role == "group"), None)
    if group is not None:
        have["group"] = group
    if "bw_util" in have:
        have["util"] = have["bw_util"]
    return [have[k] for k in PLAIN_KEYS if k in have]


def rich_table(analysis: Analysis, top: int = 25) -> Any:
    """The slowest rows as a rich Table (the ``PLAIN_KEYS`` columns the analysis has; a
    trace's "profiled as" name among them). Cells fold, never end in an ellipsis."""
    from rich.table import Table
    from rich.text import Text

    cols = plain_columns(analysis)
    title = analysis.summary.get("title", analysis.source.path)
    t = Table(title=f"{title}: {len(analysis.rows)} rows, slowest {min(top, len(analysis.rows))}")
    for c in cols:
        t.add_column(header(c), justify="left" if c.role in _LEFT else "right", overflow="fold")
    style = {"good": "green", "warn": "yellow", "bad": "red"}
    for _, r in analysis.rows.sort_values("time_s", ascending=False).head(top).iterrows():
        cells = []
        for c in cols:
            h = highlight(r[c.key], c)
            cells.append(Text(fmt(r[c.key], c), style=style[h] if h else ""))
        t.add_row(*cells)
    return t
