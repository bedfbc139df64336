"""The HTML report: ONE self-contained file (inline CSS, JS and SVG drawn from the embedded data;
no CDN, no server) with summary cards, the per-group summary, the step-time breakdown, a
sortable and filterable op table, a roofline chart with every op as a point, the pipeline
timeline (when the analysis has one) and the Orojenesis frontier of the heaviest GEMM."""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

import numpy as np

from opatlas.analyze.model import Analysis, _clean
from opatlas.analyze.tables import (
    detail_tables,
    group_summary,
    op_label,
    summary_items,
    time_breakdown,
    visible_columns,
)


def frontier_of_heaviest_gemm(analysis: Analysis) -> dict[str, Any] | None:
    """The Orojenesis frontier of the GEMM row with the most time, with where the device's
    buffer sits on it and the traffic the op's time would allow at peak bandwidth."""
    rows = analysis.rows
    if "gemm" not in rows:
        return None
    gemms = rows[rows["gemm"].map(lambda g: isinstance(g, list | tuple) and len(g) == 4)]
    if gemms.empty:
        return None
    r = gemms.loc[gemms["time_s"].idxmax()]
    from opatlas.bounds import bmm, frontier, gemm

    b, m, k, n = (int(x) for x in r["gemm"])
    word = int(analysis.summary.get("word_bytes") or 2)
    f = frontier(gemm(m, k, n, word) if b == 1 else bmm(b, m, k, n, word))
    onchip = float(analysis.summary.get("onchip_bytes") or 0) / word
    bw = float(analysis.summary.get("peak_bytes_s") or 0)
    per_call = float(r["time_s"]) / max(float(r["calls"]), 1.0)
    at = f.lookup(onchip) if onchip > 0 else None
    step = max(1, len(f.buffer) // 400)  # at most ~400 points drawn
    idx = np.unique(np.r_[np.arange(0, len(f.buffer), step), len(f.buffer) - 1])
    return {"op": op_label(r["op"], r["pass"]), "dims": {"batch": b, "M": m, "K": k, "N": n},
            "buffer": f.buffer[idx].tolist(), "accesses": f.accesses[idx].tolist(),
            "algo_min": f.algo_min, "onchip_words": onchip, "bound_words": at,
            "time_words": per_call * bw / word if bw else None}


def _payload(analysis: Analysis) -> dict[str, Any]:
    cols = visible_columns(analysis)
    rows = analysis.rows[[c.key for c in cols if c.key in analysis.rows]]
    return _clean({
        "source": analysis.source.model_dump(), "title": analysis.summary.get("title",
                                                                             analysis.source.path),
        "summary": [list(x) for x in summary_items(analysis)],
        "notes": analysis.summary.get("notes") or [],
        "groups": group_summary(analysis).to_dict("records"), "group_label": analysis.group_label,
        "breakdown": [list(kv) for kv in time_breakdown(analysis)],
        "details": detail_tables(analysis),
        "columns": [c.model_dump() for c in cols], "rows": rows.to_dict("records"),
        "peaks": {"flops": analysis.summary.get("peak_flops_s"),
                  "bytes": analysis.summary.get("peak_bytes_s")},
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
            f"<h2>Per {html.escape(analysis.group_label)}</h2><table id=groups class=grid></table>"
            f"<h2>Where the time goes</h2><svg id=breakdown class=chart></svg>"
            f"<h2>Pipeline timeline</h2><svg id=timeline class=chart></svg>"
            f"<div class=row><div><h2>Roofline</h2><svg id=roofline class=chart></svg></div>"
            f"<div><h2>Orojenesis frontier of the heaviest GEMM</h2>"
            f"<svg id=frontier class=chart></svg></div></div>"
            f"<h2>Ops <input id=filter placeholder='filter: op, pass, limiter ...'>"
            f"<span id=count></span></h2><div class=scroll><table id=ops class=grid></table></div>"
            f"<h2>Details</h2><section id=details></section>"
            f"</main><div id=tip></div>"
            f"<script id=data type=application/json>{data}</script><script>{js}</script>"
            f"</body></html>")
