"""The HTML report: ONE self-contained file (inline CSS, JS and SVG drawn from the embedded data;
no CDN, no server) with summary cards, the per-group summary, the step-time breakdown, a
sortable and filterable op table, a roofline chart with every op as a point, the pipeline
timeline (when the analysis has one) and the Orojenesis frontier of the heaviest GEMM op (of
the GEMM kernels one call runs)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from opatlas.analyze.model import Analysis, _clean
from opatlas.analyze.tables import (
    detail_tables,
    group_summary,
    group_util_label,
    op_label,
    summary_items,
    time_breakdown,
    visible_columns,
)
from opatlas.analyze.why import GEMM_NAMES, pass_gemms


def frontier_of_heaviest_gemm(analysis: Analysis) -> dict[str, Any] | None:
    """The Orojenesis frontier of the GEMM row with the most time: of the GEMM kernels one
    call runs, as the table counts them (a backward's two, dA = dC·Bᵀ and dB = Aᵀ·dC, each
    with the whole buffer in turn: their frontiers summed at every buffer size), with where
    the device's buffer sits on it (the row's ``orojenesis_bytes`` per call) and the traffic
    the row's time per call would allow at peak bandwidth. Its words are of the row's own
    dtype where known (:func:`row_dtypes`: a bf16 GEMM of a trace whose summary word is
    fp32's), else of the summary's."""
    rows = analysis.rows
    if "gemm" not in rows:
        return None
    gemms = rows[rows["gemm"].map(lambda g: isinstance(g, list | tuple) and len(g) == 4)]
    if gemms.empty:
        return None
    r = gemms.loc[gemms["time_s"].idxmax()]
    from opatlas.bounds import bmm, frontier, gemm

    g = tuple(int(x) for x in r["gemm"])
    own = r.get("gemms")
    kernels = ([tuple(int(x) for x in k) for k in own] if isinstance(own, list | tuple) and own
               else pass_gemms((g[0], g[1], g[2], g[3]), str(r["pass"])))
    word = _word_of(row_dtypes(analysis).get(r.name), analysis.summary)
    parts = [frontier(gemm(m, k, n, word) if b == 1 else bmm(b, m, k, n, word))
             for b, m, k, n in kernels]
    buffer, accesses = summed_frontier(parts)
    onchip = float(analysis.summary.get("onchip_bytes") or 0) / word
    bw = float(analysis.summary.get("peak_bytes_s") or 0)
    per_call = float(r["time_s"]) / max(float(r["calls"]), 1.0)
    at = _lookup(buffer, accesses, onchip) if onchip > 0 else None
    op = op_label(r["op"], r["pass"])
    names = GEMM_NAMES if len(kernels) > 1 else ("",)
    kernel_dims = [{"name": name, "dims": _dims(k)} for name, k in zip(names, kernels,
                                                                         strict=True)]
    title = (f"{op}: {len(kernels)} GEMM kernels per call, frontiers summed"
             if len(kernels) > 1 else f"{op}: {_dims_text(_dims(kernels[0]))}")
    return {"op": op, "title": title, "dims": _dims(g), "gemms": kernel_dims,
            "parts": [_drawn(p.buffer, p.accesses) for p in parts] if len(parts) > 1 else [],
            **_drawn(buffer, accesses), "algo_min": sum(p.algo_min for p in parts),
            "onchip_words": onchip, "bound_words": at,
            "time_words": per_call * bw / word if bw else None}


def row_dtypes(analysis: Analysis) -> pd.Series:
    """Each row's dtype (a mixed-precision trace's rows say the dtype each was rated at),
    None where unknown."""
    rows = analysis.rows
    if "dtype" in rows:
        return rows["dtype"].astype(object).where(rows["dtype"].notna(), None)
    return pd.Series([None] * len(rows), index=rows.index, dtype=object)


def dtype_peaks(summary: dict[str, Any]) -> dict[str, float]:
    """The summary's ``peak_flops_by_dtype`` (dtype -> FLOP/s), its positive finite peaks
    only ({} where it has none: a saved file may hold anything there)."""
    given = summary.get("peak_flops_by_dtype")
    if not isinstance(given, dict):
        return {}
    return {str(k): float(v) for k, v in given.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v) and v > 0}


def _word_of(dtype: Any, summary: dict[str, Any]) -> int:
    """The bytes a word of ``dtype`` (a catalog dtype name), else the summary's word."""
    from opatlas.ops.base import DTYPE_BYTES

    if isinstance(dtype, str) and dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype]
    return int(summary.get("word_bytes") or 2)


def summed_frontier(parts: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The least traffic of kernels run one after the other, each with the whole buffer: the
    pointwise sum of their frontiers (step functions), from the smallest buffer every one
    of them attains, keeping only the points that improve on every smaller buffer."""
    if len(parts) == 1:
        return np.asarray(parts[0].buffer), np.asarray(parts[0].accesses)
    start = max(int(p.buffer[0]) for p in parts)
    buffer = np.unique(np.concatenate([[start], *(p.buffer[p.buffer >= start] for p in parts)]))
    accesses = sum(p.lookup_many(buffer) for p in parts).astype(np.int64)
    keep = np.r_[True, accesses[1:] < accesses[:-1]]
    return buffer[keep], accesses[keep]


def _lookup(buffer: np.ndarray, accesses: np.ndarray, words: float) -> int | None:
    """A frontier's least traffic with ``words`` on chip (None below its first point)."""
    i = int(np.searchsorted(buffer, words, side="right")) - 1
    return None if i < 0 else int(accesses[i])


def _drawn(buffer: np.ndarray, accesses: np.ndarray) -> dict[str, list[int]]:
    """A frontier's points to draw: at most ~400, the last one always."""
    step = max(1, len(buffer) // 400)
    idx = np.unique(np.r_[np.arange(0, len(buffer), step), len(buffer) - 1])
    return {"buffer": np.asarray(buffer)[idx].tolist(),
            "accesses": np.asarray(accesses)[idx].tolist()}


def _dims(g: Sequence[int]) -> dict[str, int]:
    return dict(zip(("batch", "M", "K", "N"), (int(x) for x in g), strict=True))


def _dims_text(dims: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in dims.items())


def _group_caption(analysis: Analysis) -> str:
    said = group_util_label(analysis)
    if said is None:
        return ""
    label, meaning = (html.escape(x) for x in said)
    return (f"<p id=group-util style='font-size:12.5px;margin:0 0 6px'>util = "
            f"<b>{label}</b>: {meaning}</p>")


def _payload(analysis: Analysis) -> dict[str, Any]:
    cols = visible_columns(analysis)
    rows = analysis.rows[[c.key for c in cols if c.key in analysis.rows]]
    by_dtype = dtype_peaks(analysis.summary)
    if len(by_dtype) > 1:  # each point against its own dtype's roof (report.js roofline)
        rows = rows.assign(dtype=row_dtypes(analysis))
    return _clean({
        "source": analysis.source.model_dump(), "title": analysis.summary.get("title",
                                                                             analysis.source.path),
        "summary": [list(x) for x in summary_items(analysis)],
        "notes": analysis.summary.get("notes") or [],
        "groups": group_summary(analysis).to_dict("records"), "group_label": analysis.group_label,
        "group_util_label": (group_util_label(analysis) or ("util",))[0],
        "breakdown": [list(kv) for kv in time_breakdown(analysis)],
        "details": detail_tables(analysis),
        "columns": [c.model_dump() for c in cols], "rows": rows.to_dict("records"),
        "peaks": {"flops": analysis.summary.get("peak_flops_s"),
                  "bytes": analysis.summary.get("peak_bytes_s"),
                  **({"by_dtype": by_dtype} if len(by_dtype) > 1 else {})},
        "timeline": analysis.summary.get("timeline") or [],
        "frontier": frontier_of_heaviest_gemm(analysis)})


def render(analysis: Analysis) -> str:
    data = json.dumps(_payload(analysis)).replace("</", "<\\/")
    assets = resources.files("opatlas.analyze") / "assets"
    css = (assets / "report.css").read_text()
    js = (assets / "report.js").read_text()
    title = html.escape(str(analysis.summary.get("title", analysis.source.path)))
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'>"
            f"<title>opatlas analyze: {title}</title><style>{css}</style></head><body>"
            f"<header><h1>{title}</h1><div id=src></div></header><main>"
            f"<section id=cards class=cards></section><section id=notes></section>"
            f"<h2>Per {html.escape(analysis.group_label)}</h2>{_group_caption(analysis)}"
            f"<table id=groups class=grid></table>"
            f"<h2>Where the time goes</h2><svg id=breakdown class=chart></svg>"
            f"<h2>Pipeline timeline</h2><svg id=timeline class=chart></svg>"
            f"<div class=row><div><h2>Roofline</h2><svg id=roofline class=chart></svg></div>"
            f"<div><h2>Orojenesis frontier of the heaviest GEMM op (per call)</h2>"
            f"<svg id=frontier class=chart></svg></div></div>"
            f"<h2>Ops <input id=filter placeholder='filter: op, pass, limiter ...'>"
            f"<span id=count></span></h2><div class=scroll><table id=ops class=grid></table></div>"
            f"<h2>Details</h2><section id=details></section>"
            f"</main><div id=tip></div>"
            f"<script id=data type=application/json>{data}</script><script>{js}</script>"
            f"</body></html>")
