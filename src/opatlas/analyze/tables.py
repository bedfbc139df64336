"""Formatting shared by the views: a value as text by its column's unit, the highlight of a
cell by its column's role (PyBuda's colours), and the per-group summary."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from opatlas.analyze.model import Analysis, Column

UTIL_GOOD, UTIL_BAD = 0.50, 0.25  # utilization: green above, red below
ERROR_WARN, ERROR_BAD = 0.20, 0.50  # estimate vs measured: yellow at, red at
SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def fmt_seconds(v: float) -> str:
    a = abs(v)
    if a >= 1:
        return f"{v:.3f} s"
    if a >= 1e-3:
        return f"{v * 1e3:.3f} ms"
    return f"{v * 1e6:.1f} µs"


def fmt_si(v: float, unit: str) -> str:
    for scale, prefix in SI:
        if abs(v) >= scale:
            return f"{v / scale:.2f} {prefix}{unit}"
    return f"{v:.3g} {unit}".strip()


def fmt(value: Any, col: Column | None) -> str:
    """A cell as text."""
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return json.dumps(value)
    if missing(value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) or col is None:
        return str(value)
    unit = col.unit
    if unit == "s":
        return fmt_seconds(float(value))
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
        return f"{value:.4g}"
    return str(value)


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


def group_summary(analysis: Analysis) -> pd.DataFrame:
    """Per stage/epoch/device: time, share, slowest op, its time, FLOP-weighted utilization
    and the communication share (PyBuda's per-epoch summary)."""
    rows = analysis.rows
    out = []
    total = analysis.total_time_s or 1.0
    for g, sub in rows.groupby(rows["group"].astype(str), sort=False):
        t = float(sub["time_s"].sum())
        slow = sub.loc[sub["time_s"].idxmax()] if len(sub) else None
        comm = sub["limiter"].eq("communication")
        util = (float(pd.to_numeric(sub.get("util_compute"), errors="coerce").mul(sub["time_s"])
                      .sum() / t) if "util_compute" in sub and t > 0 else float("nan"))
        out.append({"group": g, "time_s": t, "share": t / total,
                    "slowest_op": "" if slow is None else f"{slow['op']} {slow['pass']}",
                    "slowest_time_s": 0.0 if slow is None else float(slow["time_s"]),
                    "util": util, "comm_share": float(sub.loc[comm, "time_s"].sum()) / t if t else 0,
                    "rows": len(sub)})
    return pd.DataFrame(out)


SUMMARY_SKIP = {"timeline", "notes", "title", "throughput_unit", "utilization_label",
                "estimation_error_label", "word_bytes", "stage", "total_time_s"}


def _unit_of(key: str) -> str:
    """A summary value's unit from its key's suffix."""
    for suffix, unit in (("flops_s", "FLOP/s"), ("bytes_s", "B/s"), ("per_s", ""),
                         ("_bytes", "B"), ("_s", "s")):
        if key.endswith(suffix):
            return unit
    return ""


def summary_items(analysis: Analysis) -> list[tuple[str, str, str | None]]:
    """(label, value, highlight) of the summary: performance first, then the rest."""
    s = analysis.summary
    items: list[tuple[str, str, str | None]] = [
        ("total time", fmt_seconds(analysis.total_time_s), None)]
    if s.get("throughput") is not None:
        items.append(("approx. performance", f"{s['throughput']:,.0f} {s.get('throughput_unit', '/s')}",
                      None))
    if s.get("utilization") is not None:
        u = float(s["utilization"])
        items.append((s.get("utilization_label", "utilization"), f"{100 * u:.1f}%",
                      highlight(u, Column(key="u", label="u", role="util"))))
    if s.get("estimation_error") is not None:
        e = float(s["estimation_error"])
        items.append((s.get("estimation_error_label", "estimation error"), f"{100 * e:+.1f}%",
                      highlight(e, Column(key="e", label="e", role="error"))))
    shown = {"total_time_s", "throughput", "utilization", "estimation_error"}
    for k, v in s.items():
        if k in shown or k in SUMMARY_SKIP or isinstance(v, dict | list):
            continue
        items.append((k.replace("_", " "), fmt(v, Column(key=k, label=k, unit=_unit_of(k),
                                                          role="count")), None))
    return items


PLAIN_KEYS = ("op", "pass", "group", "calls", "time_s", "predicted_time_s", "measured_time_s",
              "error", "share", "util", "bound_time_s", "headroom", "limiter")


def rich_table(analysis: Analysis, top: int = 25) -> Any:
    from rich.table import Table

    have = {c.key: c for c in visible_columns(analysis)}
    cols = [have[k] for k in PLAIN_KEYS if k in have]
    title = analysis.summary.get("title", analysis.source.path)
    t = Table(*[c.label for c in cols], title=f"{title}: {len(analysis.rows)} rows, "
                                              f"slowest {min(top, len(analysis.rows))}")
    style = {"good": "green", "warn": "yellow", "bad": "red"}
    for _, r in analysis.rows.sort_values("time_s", ascending=False).head(top).iterrows():
        cells = []
        for c in cols:
            h = highlight(r[c.key], c)
            text = fmt(r[c.key], c)
            cells.append(f"[{style[h]}]{text}[/]" if h else text)
        t.add_row(*cells)
    return t
