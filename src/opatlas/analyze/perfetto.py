"""The estimated step as a Chrome/Perfetto trace (open it at ui.perfetto.dev or
chrome://tracing): one process per pipeline stage, one thread per lane (compute, TP comm,
EP comm, DP comm, p2p), an ``X`` event per schedule block and, nested inside it, one per op
or collective, with metadata events naming processes and threads. Events on one thread nest
or follow each other, never overlap partially (Perfetto misdraws overlaps)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from opatlas.analyze.timeline import LANES, Block, step_timeline
from opatlas.atomic import write_atomic
from opatlas.estimate.engine import Estimate

_LANE_NAMES = {"compute": "compute", "tp": "TP comm", "ep": "EP comm", "dp": "DP comm",
               "p2p": "p2p"}
_US = 1e6


def trace_events(est: Estimate, blocks: list[Block] | None = None) -> list[dict[str, Any]]:
    blocks = step_timeline(est) if blocks is None else blocks
    events: list[dict[str, Any]] = []
    stages = sorted({b.stage for b in blocks})
    lanes = [ln for ln in LANES if any(b.lane == ln for b in blocks)]
    for d in stages:
        pid = d + 1
        events.append({"name": "process_name", "ph": "M", "pid": pid,
                       "args": {"name": f"pipeline stage {d}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                       "args": {"sort_index": d}})
        for tid, lane in enumerate(lanes, 1):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": _LANE_NAMES[lane]}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
    tids = {lane: i for i, lane in enumerate(lanes, 1)}
    # parents before their children at the same start, so viewers nest them
    for b in sorted(blocks, key=lambda b: (b.stage, tids[b.lane], b.start_s, b.depth)):
        args: dict[str, Any] = {"kind": b.kind}
        if b.micro_batch is not None:
            args["micro_batch"] = b.micro_batch
            args["chunk"] = b.chunk
        events.append({"name": b.name, "cat": b.lane, "ph": "X", "pid": b.stage + 1,
                       "tid": tids[b.lane], "ts": b.start_s * _US, "dur": b.dur_s * _US,
                       "args": args})
    return events


def write_trace(est: Estimate, path: str | Path) -> Path:
    """Write the trace (gzipped when the name ends in .gz); returns the path."""
    path = Path(path)
    p = est.config.parallel
    doc = {"traceEvents": trace_events(est), "displayTimeUnit": "ms",
           "metadata": {"model": est.config.model.name, "step_time_s": est.step_time_s,
                        "schedule": p.schedule, "pp": p.pp, "tp": p.tp, "dp": p.dp,
                        "micro_batches": est.config.micro_batches,
                        "note": "every stage runs at the slowest stage's pace (the estimator's "
                                "model); the ops shown are the slowest stage's"}}
    data = json.dumps(doc).encode()
    return write_atomic(path, gzip.compress(data) if path.suffix == ".gz" else data, "--trace")
