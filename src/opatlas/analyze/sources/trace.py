"""A PyTorch profiler trace (Chrome trace JSON from ``torch.profiler`` with
``record_shapes=True``; ``.json`` or ``.json.gz``): one row per catalog op, pass and shape, plus
"other" rows for everything else, so the rows add up to the trace's busy time.

Each operator event belongs to its outermost enclosing op that maps to the catalog (aten::linear
holds its addmm; an autograd node's mm calls are GEMMs of the backward), or else to an "other"
row of its own name. Where the trace has GPU kernels, a row's time is the time of the kernels
its ops launched (kernel -> runtime launch by correlation id -> the op enclosing the launch) and
the busy time is the kernels' summed duration; on a CPU-only trace it is the ops' self time, and
the busy time is the summed duration of each thread's top-level ops."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from opatlas.analyze.aten import Mapped, backward_of, map_op, maybe_catalog
from opatlas.analyze.chrome import Events, load_trace, nest, split_events
from opatlas.analyze.model import Analysis, Column, Source
from opatlas.analyze.sources import ReadOptions, SourceKind, register
from opatlas.analyze.why import (
    WHY_FIRST,
    WHY_REST,
    Peaks,
    empirical_peaks,
    empirical_peaks_text,
    explain,
)
from opatlas.errors import OpatlasError

COLUMNS = [
    Column(key="op", label="op", role="id"),
    Column(key="pass", label="pass", role="id"),
    Column(key="name", label="profiled as", role="text"),
    Column(key="group", label="device", role="group"),
    Column(key="calls", label="calls", role="count"),
    Column(key="time_s", label="time", role="measured", unit="s",
           help="GPU kernel time of the op's launches, or the CPU ops' self time"),
    *WHY_FIRST,
    Column(key="flops", label="FLOPs", role="count", unit="FLOP"),
    Column(key="bytes", label="bytes", role="count", unit="B"),
    *WHY_REST,
    Column(key="shape", label="shape", role="shape"),
]
BACKWARD_MARKS = ("autograd::engine::evaluate_function", "Backward0", "Backward1")


def detect(path: Path) -> bool:
    name = path.name.lower()
    if name.endswith((".json.gz", ".pt.trace.json")):
        return True
    if not name.endswith(".json") or not path.is_file():
        return False
    with path.open("rb") as fh:
        head = fh.read(4096)
    return b"traceEvents" in head or (head.lstrip()[:1] == b"[" and b'"ph"' in head)


def read(path: Path, options: ReadOptions) -> Analysis:
    doc = load_trace(path)
    ops, kernels, runtime = split_events(doc)
    if not len(ops):
        raise OpatlasError(f"{path}: the trace has no operator events (cat 'cpu_op'); record it "
                           f"with torch.profiler(activities=[ProfilerActivity.CPU, ...])")
    if not any("Input Dims" in a for a in ops.args):
        raise OpatlasError(f"{path}: the trace was recorded without shapes: no operator event "
                           f"has 'Input Dims'. Record it with torch.profiler.profile("
                           f"record_shapes=True) so ops can be mapped and counted")
    rows, busy, mode = _rows(ops, kernels, runtime)
    peaks, notes = _peaks(doc, rows, options)
    notes += _cpu_only(len(kernels), peaks)
    notes += _unmapped(rows, busy)
    analysed = explain(rows.drop(columns=["word"]), peaks, busy)
    summary = {"title": f"profiler trace {path.name}", "total_time_s": busy, "busy_time_s": busy,
               "total_time_label": "busy time",
               "time_basis": mode, "events": len(ops) + len(kernels) + len(runtime),
               "device": peaks.name, "peak_flops_s": peaks.flops_s,
               "peak_bytes_s": peaks.bytes_s if peaks.memory_roof else None,  # None: no roof
               "onchip_bytes": peaks.onchip_bytes or None,  # None: not known (empirical)
               "word_bytes": peaks.word_bytes,
               **({"peaks": empirical_peaks_text(peaks.memory_roof)}
                  if _empirical(peaks) else {}),
               "utilization": float(np.nansum(analysed["flops"]) / (busy * peaks.flops_s))
               if busy > 0 else None, "utilization_label": "FLOP util", "notes": notes}
    return Analysis(Source(kind="trace", path=str(path)), summary, analysed, list(COLUMNS),
                    "device")


def _concat(a: Events, b: Events) -> Events:
    return Events(a.name + b.name, np.concatenate([a.ts, b.ts]), np.concatenate([a.dur, b.dur]),
                  np.concatenate([a.thread, b.thread]), a.args + b.args)


def _rows(ops: Events, kernels: Events, runtime: Events) -> tuple[pd.DataFrame, float, str]:
    ev = _concat(ops, runtime)  # launches nest in the op that made them
    order, parent, self_time = nest(ev)
    names = [ev.name[j] for j in order]
    is_op = (order < len(ops)).tolist()
    owner = np.full(len(order), -1, dtype=np.int64)
    backward = np.zeros(len(order), dtype=bool)
    mapped: dict[int, Mapped] = {}
    cache: dict[tuple[str, str, str], Mapped | None] = {}
    par = parent.tolist()
    for i, name in enumerate(names):
        p = par[i]
        backward[i] = (p >= 0 and backward[p]) or name.startswith(BACKWARD_MARKS[0]) \
            or name.endswith(BACKWARD_MARKS[1:])
        if p >= 0 and owner[p] >= 0:
            owner[i] = owner[p]
            continue
        m = _mapped(name, ev.args[order[i]], cache) if is_op[i] else None
        if m is not None:
            owner[i] = i
            mapped[i] = backward_of(m) if backward[i] and m.pass_ == "fwd" else m
    acc: dict[Any, list[float]] = defaultdict(lambda: [0.0, 0.0])  # key -> [time, calls]
    if len(kernels):
        mode = "GPU kernel time of each op's launches"
        busy = float(kernels.dur.sum())
        pos_of = np.empty(len(order), dtype=np.int64)
        pos_of[order] = np.arange(len(order))
        launch = {}
        for j in range(len(ops), len(ev)):
            corr = ev.args[j].get("correlation")
            if corr is not None:
                launch[corr] = pos_of[j]
        for k in range(len(kernels)):
            i = launch.get(kernels.args[k].get("correlation"))
            if i is None:
                key: Any = ("other", f"kernel {kernels.name[k]}")
            else:
                key = owner[i] if owner[i] >= 0 else ("other", names[par[i]] if par[i] >= 0
                                                      else names[i])
            acc[key][0] += kernels.dur[k]
    else:
        mode = "CPU self time of each op"
        busy = float(ev.dur[order][parent < 0].sum())
        st = self_time.tolist()
        for i in range(len(order)):
            key = owner[i] if owner[i] >= 0 else ("other", names[i])
            acc[key][0] += st[i]
    for i in mapped:
        acc[i][1] += 1  # calls: each owner is one call
    for i, name in enumerate(names):
        if owner[i] < 0:
            key = ("other", name)
            if key in acc:
                acc[key][1] += 1
    return _table(acc, mapped, names, bool(len(kernels))), busy * 1e-6, mode


def _mapped(name: str, args: dict[str, Any], cache: dict[tuple[str, str, str], Mapped | None]
            ) -> Mapped | None:
    """map_op, once per distinct (name, shapes, dtypes): a trace repeats the same calls."""
    if not maybe_catalog(name):
        return None
    key = (name, str(args.get("Input Dims")), str(args.get("Input type")))
    if key not in cache:
        cache[key] = map_op(name, args)
    return cache[key]


def _table(acc: dict[Any, list[float]], mapped: dict[int, Mapped], names: list[str],
           gpu: bool) -> pd.DataFrame:
    grouped: dict[tuple, dict[str, Any]] = {}
    for key, (t, calls) in acc.items():
        if isinstance(key, tuple):
            k = ("other", key[1])
            row = grouped.setdefault(k, {"op": "other", "pass": "-", "name": key[1], "calls": 0.0,
                                         "time_s": 0.0, "flops": np.nan, "bytes": np.nan,
                                         "shape": {}, "gemms": None, "gemm": None,
                                         "limiter": "unknown", "word": np.nan})
        else:
            m = mapped[int(key)]
            k = (m.op, m.pass_, names[int(key)], json.dumps(m.shape, sort_keys=True))
            row = grouped.setdefault(k, {"op": m.op, "pass": m.pass_, "name": names[int(key)],
                                         "calls": 0.0, "time_s": 0.0, "flops": 0.0, "bytes": 0.0,
                                         "shape": m.shape, "gemms": m.gemms or None,
                                         "gemm": list(m.gemms[0]) if m.gemms else None,
                                         "limiter": None, "word": m.word})
            row["flops"] += m.flops * calls
            row["bytes"] += m.bytes * calls
        row["calls"] += calls
        row["time_s"] += t * 1e-6
    df = pd.DataFrame(list(grouped.values()))
    df["group"] = "gpu" if gpu else "cpu"
    return df.sort_values("time_s", ascending=False, kind="stable").reset_index(drop=True)


def _peaks(doc: dict[str, Any], rows: pd.DataFrame, options: ReadOptions
           ) -> tuple[Peaks, list[str]]:
    from opatlas.devices import empirical_device, get_device

    words = rows.loc[rows["flops"] > 0, "word"].dropna()
    word = int(words.mode().iloc[0]) if len(words) else 4
    dtype = {1: "fp8", 2: "bf16", 8: "fp64"}.get(word, "fp32")
    name = options.extra.get("device")
    props = doc.get("deviceProperties") or []
    if not name and props and isinstance(props[0], dict):
        name = str(props[0].get("name", "")).replace(" ", "")
    given = options.extra.get("device")
    if given:  # named by the user: a typo is an error naming the catalog, not a fallback
        d = get_device(str(given))
        return Peaks(d.name, d.peak(dtype), d.bandwidth, d.onchip_bytes, word), []
    if name:
        try:
            d = get_device(str(name))
            return Peaks(d.name, d.peak(dtype), d.bandwidth, d.onchip_bytes, word), []
        except OpatlasError:
            pass
    ok = rows[rows["limiter"].isna()]
    flops, nbytes = ok["flops"].to_numpy(float), ok["bytes"].to_numpy(float)
    d = empirical_device(name or "cpu", flops, nbytes, ok["time_s"].to_numpy(float), dtype)
    peaks, notes = empirical_peaks(f"device {name}" if name else "the device of this trace",
                                   d.peak(dtype), d.bandwidth, dtype, word, flops, nbytes,
                                   "profiled ops")
    notes[0] += "; no Orojenesis bound is given (name a catalog device with --device)"
    return dataclasses.replace(peaks, name=d.name), notes


def _empirical(peaks: Peaks) -> bool:
    """Peaks from the trace's own ops (a device outside the catalog)."""
    from opatlas.devices import find_device

    return find_device(peaks.name) is None


def _cpu_only(kernels: int, peaks: Peaks) -> list[str]:
    """A note when a trace without device kernels is compared with a catalog device's peaks
    (--device, or the trace's own device properties): its times are the CPU ops' self times."""
    if kernels or _empirical(peaks):
        return []
    return [f"the trace has no device (GPU) kernels: its times are the CPU ops' self times, "
            f"here against {peaks.name}'s peaks; their util and headroom say how far the CPU "
            f"is from that device, not how the device did (profile with "
            f"ProfilerActivity.CUDA for kernel times)"]


def _unmapped(rows: pd.DataFrame, busy: float) -> list[str]:
    """A note when much of the busy time sits in ops the catalog does not map ("other" rows:
    no FLOPs, no bound), naming the largest."""
    other = rows[rows["op"] == "other"]
    share = float(other["time_s"].sum()) / busy if busy > 0 else 0.0
    if share < 0.25:
        return []
    top = other.nlargest(3, "time_s")
    names = ", ".join(f"{n} {100 * t / busy:.0f}%" for n, t in zip(top["name"], top["time_s"],
                                                                   strict=True))
    return [f"{100 * share:.0f}% of the busy time is in ops opatlas does not map to its catalog "
            f"(no FLOPs, bytes or bound for them; the largest: {names}); the utilization and "
            f"any peak derived from this trace's own ops cover the rest only"]


register(SourceKind("trace", detect, read,
                    "a torch.profiler Chrome trace (.json, .json.gz) recorded with shapes",
                    uses=frozenset({"device"})))
