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

from opatlas.analyze.aten import Mapped, backward_of, cast_op, map_op, maybe_catalog
from opatlas.analyze.chrome import AUTOCAST_TYPES, Events, load_trace, nest, split_events
from opatlas.analyze.model import Analysis, Column, Source
from opatlas.analyze.sources import ReadOptions, SourceKind, register
from opatlas.analyze.tables import fmt_si
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
    Column(key="dtype", label="dtype", role="text",
           help="the dtype whose peaks the row is rated against (its inputs' word size)"),
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
# catalog ops that may do nothing: one with no child event (no op called, no kernel launched)
# did nothing and is not counted (a dropout in eval mode or of p=0 returns its input)
NO_OP_WITHOUT_CHILDREN = {"dropout"}
# the dtype whose peak a row of this many bytes a word is rated against (else fp32)
WORD_DTYPES = {1: "fp8", 2: "bf16", 8: "fp64"}
# An empirical peak comes from rows whose calls take at least this long: the profiler times
# an event to about a microsecond and adds its own overhead to it, so a shorter call's FLOP/s
# or bytes/s is noise (a no-op of 0.07 µs "moving" a MB reads as 20 TB/s); 10 µs is timed
# within ~10%.
MIN_PEAK_CALL_S = 10e-6


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
    rows, busy, mode, row_notes = _rows(ops, kernels, runtime)
    peaks, by_word, notes = _peaks(path, doc, rows, options)
    notes += row_notes
    notes += _cpu_only(len(kernels), peaks)
    notes += _unmapped(rows, busy)
    analysed = _explain(rows, peaks, by_word, busy)
    peaks_text = (empirical_peaks_text(peaks.memory_roof) if _empirical(peaks)
                  else _per_dtype_text(by_word))
    summary = {"title": f"profiler trace {path.name}", "total_time_s": busy, "busy_time_s": busy,
               "total_time_label": "busy time",
               "time_basis": mode, "events": len(ops) + len(kernels) + len(runtime),
               "device": peaks.name, "peak_flops_s": peaks.flops_s,
               "peak_bytes_s": peaks.bytes_s if peaks.memory_roof else None,  # None: no roof
               "onchip_bytes": peaks.onchip_bytes or None,  # None: not known (empirical)
               "word_bytes": peaks.word_bytes,
               **({"peaks": peaks_text} if peaks_text else {}),
               **_per_dtype_peaks(by_word),
               "utilization": _peak_time(rows, peaks, by_word) / busy if busy > 0 else None,
               "utilization_label": "FLOP util", "notes": notes}
    return Analysis(Source(kind="trace", path=str(path)), summary, analysed, list(COLUMNS),
                    "device")


def _concat(a: Events, b: Events) -> Events:
    return Events(a.name + b.name, np.concatenate([a.ts, b.ts]), np.concatenate([a.dur, b.dur]),
                  np.concatenate([a.thread, b.thread]), a.args + b.args)


def _rows(ops: Events, kernels: Events, runtime: Events
          ) -> tuple[pd.DataFrame, float, str, list[str]]:
    ev = _concat(ops, runtime)  # launches nest in the op that made them
    order, parent, self_time = nest(ev)
    names = [ev.name[j] for j in order]
    args = [ev.args[j] for j in order]
    is_op = (order < len(ops)).tolist()
    owner = np.full(len(order), -1, dtype=np.int64)
    root = np.arange(len(order))  # each event's top-level ancestor (itself at the top)
    backward = np.zeros(len(order), dtype=bool)
    mapped: dict[int, Mapped] = {}
    labels: dict[int, str] = {}  # a row's name where it is not the event's
    cache: dict[tuple[str, ...], Mapped | None] = {}
    notes: list[str] = []
    par = parent.tolist()
    has_child = np.zeros(len(order), dtype=bool)
    has_child[parent[parent >= 0]] = True
    for i, name in enumerate(names):
        p = par[i]
        backward[i] = (p >= 0 and backward[p]) or name.startswith(BACKWARD_MARKS[0]) \
            or name.endswith(BACKWARD_MARKS[1:])
        if p >= 0:
            root[i] = root[p]
        if p >= 0 and owner[p] >= 0:
            cast = _autocast_cast(name, args[i], args[p], mapped.get(p), notes) \
                if is_op[i] and owner[p] == p else None
            if cast is None:
                owner[i] = owner[p]
            else:  # its own row: the op it casts for is timed by its own kernels
                owner[i], labels[i] = i, f"{name}{CAST_LABEL}"
                mapped[i] = backward_of(cast) if backward[i] else cast
            continue
        m = _mapped(name, args[i], cache) if is_op[i] else None
        if m is not None and m.op in NO_OP_WITHOUT_CHILDREN and not has_child[i]:
            m = None
        if m is not None:
            owner[i] = i
            mapped[i] = backward_of(m) if backward[i] and m.pass_ == "fwd" else m
    _loss_backward(mapped, names, args, par, owner, backward)
    acc: dict[Any, list[float]] = defaultdict(lambda: [0.0, 0.0])  # key -> [time, calls]
    if len(kernels):
        mode = "GPU kernel time of each op's launches"
        busy = float(kernels.dur.sum())
        _kernel_times(acc, kernels, ev, order, len(ops), owner, names, par, root)
    else:
        mode = "CPU self time of each op"
        busy = float(ev.dur[order][parent < 0].sum())
        st = self_time.tolist()
        for i in range(len(order)):
            key = owner[i] if owner[i] >= 0 else ("other", names[i])
            acc[key][0] += st[i]
        for i, name in enumerate(names):
            if owner[i] < 0:
                acc[("other", name)][1] += 1
    for i in mapped:
        acc[i][1] += 1  # calls: each owner is one call
    table = _table(acc, mapped, [labels.get(i, n) for i, n in enumerate(names)],
                   bool(len(kernels)))
    return table, busy * 1e-6, mode, notes + _no_kernel(table)


CASTS = {"aten::to", "aten::_to_copy"}
CAST_LABEL = " (autocast)"
EVALUATE = "autograd::engine::evaluate_function: "
# the limiter of an op row of a GPU trace whose calls launched no kernel (an optimizer's step
# counters on CPU tensors): its work, if any, was done on the host
NO_KERNEL = "no GPU kernel"


def _autocast_cast(name: str, args: dict[str, Any], owner_args: dict[str, Any],
                   owner: Mapped | None, notes: list[str]) -> Mapped | None:
    """The cast row of an ``aten::to`` that autocast called inside the mapped op it
    re-dispatched (the outer event, :data:`AUTOCAST_TYPES` set, encloses the casts of its
    inputs, then the op on the cast inputs), else None. A cast that an op asks for itself
    (softmax's dtype) stays the op's: its bytes count the op's output dtype."""
    if name not in CASTS or owner is None or AUTOCAST_TYPES not in owner_args:
        return None
    cast, recorded = cast_op(args, owner.word)
    if not recorded:
        note = (f"{name} under {owner.op}: its target dtype was not recorded ('Concrete "
                f"Inputs'); its bytes take the {owner.word}-byte word that {owner.op} ran with")
        if note not in notes:
            notes.append(note)
    return cast


def _loss_backward(mapped: dict[int, Mapped], names: list[str], args: list[dict[str, Any]],
                   par: list[int], owner: np.ndarray, backward: np.ndarray) -> None:
    """A softmax backward whose forward was a cross-entropy's log-softmax is that
    cross-entropy's backward: the autograd node's sequence number names the forward events
    it differentiates, and the mapped op that holds them."""
    fwd: dict[str, str] = {}
    for i, a in enumerate(args):
        seq = a.get("Sequence number")
        if seq is not None and owner[i] >= 0 and not backward[i]:
            fwd.setdefault(str(seq), mapped[int(owner[i])].op)
    for i, m in list(mapped.items()):
        if m.op != "softmax" or m.pass_ != "bwd":
            continue
        up = par[i]
        while up >= 0 and not names[up].endswith(BACKWARD_MARKS[1:]):
            up = par[up]
        seq = args[up].get("Sequence number") if up >= 0 else None
        if seq is not None and fwd.get(str(seq)) == "cross_entropy":
            mapped[i] = dataclasses.replace(m, op="cross_entropy")


def _kernel_times(acc: dict[Any, list[float]], kernels: Events, ev: Events, order: np.ndarray,
                  n_ops: int, owner: np.ndarray, names: list[str], par: list[int],
                  root: np.ndarray) -> None:
    """Each kernel's time to the row of the op that launched it (kernel -> runtime launch by
    correlation id). An unmapped launching op's row is named by its top-level event too (the
    autograd node, or the op it was called in: "ToCopyBackward0 > aten::copy_"), so that
    different work done by the same aten op makes different rows; its calls are the
    launching events."""
    pos_of = np.empty(len(order), dtype=np.int64)
    pos_of[order] = np.arange(len(order))
    launch = {}
    for j in range(n_ops, len(ev)):
        corr = ev.args[j].get("correlation")
        if corr is not None:
            launch[corr] = int(pos_of[j])
    callers: dict[Any, set[int]] = defaultdict(set)
    for k in range(len(kernels)):
        i = launch.get(kernels.args[k].get("correlation"))
        if i is None:  # its launch is not in the trace: each kernel is a call
            key: Any = ("other", f"kernel {kernels.name[k]}")
            acc[key][1] += 1
        elif owner[i] >= 0:
            key = int(owner[i])
        else:
            inner = par[i] if par[i] >= 0 else i
            key = ("other", _other_name(names, inner, int(root[inner])))
            callers[key].add(inner)
        acc[key][0] += kernels.dur[k]
    for key, who in callers.items():
        acc[key][1] += len(who)


def _other_name(names: list[str], inner: int, top: int) -> str:
    """An unmapped op's row name: "OUTER > INNER" where its top-level event (an autograd
    node's, or an op's) is another, else its own name."""
    outer = names[top].removeprefix(EVALUATE)
    return names[inner] if outer == names[inner] else f"{outer} > {names[inner]}"


def _no_kernel(rows: pd.DataFrame) -> list[str]:
    """A note naming the op rows labelled :data:`NO_KERNEL`."""
    idle = rows[rows["limiter"] == NO_KERNEL]
    if idle.empty:
        return []
    named = ", ".join(sorted(set(idle["name"])))
    return [f"{len(idle)} op row(s) launched no GPU kernel ({named}): their work ran on the "
            f"host (CPU tensors, such as an optimizer's step counters); they have no GPU time "
            f"and no bound, labelled '{NO_KERNEL}'"]


def _mapped(name: str, args: dict[str, Any], cache: dict[tuple[str, ...], Mapped | None]
            ) -> Mapped | None:
    """map_op, once per distinct (name, shapes, dtypes, scalars): a trace repeats the same
    calls."""
    if not maybe_catalog(name):
        return None
    key = (name, str(args.get("Input Dims")), str(args.get("Input type")),
           str(args.get("Concrete Inputs")))
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
    if gpu:  # an op of a GPU trace that launched no kernel: said, not rated
        idle = (df["op"] != "other") & (df["time_s"] <= 0)
        df["limiter"] = df["limiter"].astype(object).where(~idle, NO_KERNEL)
    return df.sort_values("time_s", ascending=False, kind="stable").reset_index(drop=True)


def _peaks(path: Path, doc: dict[str, Any], rows: pd.DataFrame, options: ReadOptions
           ) -> tuple[Peaks, dict[int, Peaks], list[str]]:
    """The device's peaks at the dtype that does most of the FLOPs (the summary's), the peaks
    each word size's rows are rated against (a catalog device's dense peak at that dtype: a
    bf16 GEMM among fp32 ops is rated against the bf16 peak), and the notes. A device outside
    the catalog has one set of empirical peaks for all rows."""
    from opatlas.devices import find_device, get_device

    words = _words(rows)
    word = words[0] if words else 4
    recorded = _recorded_device(doc)
    given = options.extra.get("device")
    notes: list[str] = []
    if given:  # named by the user: a typo is an error naming the catalog, not a fallback
        d = get_device(str(given))
        if recorded and find_device(recorded) is not d:
            notes.append(f"the trace was recorded on {recorded}; {d.name}'s peaks are used, as "
                         f"--device asks")
    else:
        found = find_device(recorded) if recorded else None
        if found is None:
            peaks, notes = _empirical_device(path, recorded, rows, word, options.strict)
            return peaks, {}, notes
        d = found
    by_word = {w: Peaks(d.name, d.peak(_dtype(w)), d.bandwidth, d.onchip_bytes, w)
               for w in (words or [word])}
    return by_word[word], by_word, notes


def _dtype(word: int) -> str:
    return WORD_DTYPES.get(int(word), "fp32")


def _words(rows: pd.DataFrame) -> list[int]:
    """The word sizes of the rows with FLOPs, the one with the most FLOPs first."""
    counted = rows[rows["flops"] > 0].dropna(subset=["word"])
    by = counted.groupby("word")["flops"].sum().sort_values(ascending=False, kind="stable")
    return [int(w) for w in by.index]


def _recorded_device(doc: dict[str, Any]) -> str:
    """The GPU the trace was recorded on (its deviceProperties), as the trace names it."""
    props = doc.get("deviceProperties") or []
    if props and isinstance(props[0], dict):
        return str(props[0].get("name", "")).strip()
    return ""


def _empirical_device(path: Path, recorded: str, rows: pd.DataFrame, word: int, strict: bool
                      ) -> tuple[Peaks, list[str]]:
    """Peaks from the trace's own counted rows whose calls are long enough to time
    (:data:`MIN_PEAK_CALL_S`); shorter ones only when no row is, said in a note (an error
    under --strict)."""
    from opatlas.devices import empirical_device

    name = recorded or "cpu"
    if strict:  # the peaks would be the trace's own best: a fallback for a datasheet's
        raise OpatlasError(_refused_empirical(path, recorded))
    ok = rows[rows["limiter"].isna()]
    t = ok["time_s"].to_numpy(float)
    counted = ok[np.isfinite(ok["flops"].to_numpy(float))
                 & np.isfinite(ok["bytes"].to_numpy(float)) & (t > 0)]
    if counted.empty:
        raise OpatlasError(_nothing_counted(path, name, rows))
    long = counted[counted["time_s"] / counted["calls"].clip(lower=1) >= MIN_PEAK_CALL_S]
    notes = []
    if long.empty:
        msg = (f"{path}: no counted op of this trace takes {MIN_PEAK_CALL_S * 1e6:g} µs a call, "
               f"the least whose time gives a rate: the empirical peaks of {name} come from "
               f"shorter calls and may be far off")
        if strict:
            raise OpatlasError(f"{msg}; --strict refuses them (name a catalog device with "
                               f"--device NAME)")
        notes.append(msg)
        long = counted
    dtype = _dtype(word)
    flops, nbytes = long["flops"].to_numpy(float), long["bytes"].to_numpy(float)
    d = empirical_device(name, flops, nbytes, long["time_s"].to_numpy(float), dtype)
    who = f"device {recorded}" if recorded else "the device of this trace"
    what = "profiled ops" if notes else f"profiled ops of {MIN_PEAK_CALL_S * 1e6:g} µs a call or more"
    peaks, more = empirical_peaks(who, d.peak(dtype), d.bandwidth, dtype, word, flops, nbytes,
                                  what)
    # the advice holds when the note is shown again from --load, where --device is ignored
    more[0] += ("; no Orojenesis bound is given (analyze the trace again with --device NAME "
                "to name a catalog device)")
    return dataclasses.replace(peaks, name=d.name), more + notes


def _refused_empirical(path: Path, recorded: str) -> str:
    """--strict's one line on a trace whose device is outside the catalog: its peaks would be
    empirical (the best its own ops attain), and --device names the catalog's instead."""
    from opatlas.devices import DEVICES

    what = f"device {recorded!r}" if recorded else "device (none recorded: a CPU trace)"
    return (f"{path}: its {what} is not in the catalog, so its peaks would be empirical (the "
            f"best its own ops attain); --strict refuses them: name a catalog device with "
            f"--device NAME (known: {', '.join(DEVICES)})")


def _nothing_counted(path: Path, name: str, rows: pd.DataFrame) -> str:
    """The error of a trace with no FLOP or byte count on a device outside the catalog."""
    top = rows[rows["op"] == "other"].nlargest(3, "time_s")
    total = float(rows["time_s"].sum())
    named = ", ".join(f"{n} {100 * t / total:.0f}%" if total > 0 else str(n)
                      for n, t in zip(top["name"], top["time_s"], strict=True))
    named = f" (the largest: {named})" if named else ""
    return (f"{path}: no op in the trace has FLOP or byte counts: none maps to opatlas's "
            f"catalog{named}, and its device ({name}) is not in the catalog, so there is no "
            f"roofline to derive from it; name a catalog device with --device NAME to compare "
            f"its times with that device's peaks")


def _explain(rows: pd.DataFrame, peaks: Peaks, by_word: dict[int, Peaks], busy: float
             ) -> pd.DataFrame:
    """explain() of each word size's rows against its own peaks (``peaks`` for rows of no
    counted word: "other" rows), in the rows' order, each with the ``dtype`` it was rated at
    (None for those)."""
    word = rows["word"].fillna(-1).astype(int)
    dtype = word.map(lambda w: _dtype(w) if w > 0 else None).astype(object)
    rows = rows.drop(columns=["word"])
    parts = [explain(sub, by_word.get(int(w), peaks), busy)
             for w, sub in rows.groupby(word, sort=False)]
    out = pd.concat(parts).sort_index() if parts else explain(rows, peaks, busy)
    return out.assign(dtype=dtype)


def _peak_time(rows: pd.DataFrame, peaks: Peaks, by_word: dict[int, Peaks]) -> float:
    """The time the rows' FLOPs take at the peak of each one's dtype: FLOP util's numerator
    (busy time at peak), which a mixed-precision trace cannot get from one peak."""
    peak = rows["word"].map(lambda w: by_word.get(int(w), peaks).flops_s if pd.notna(w)
                            else peaks.flops_s)
    return float(np.nansum(rows["flops"].to_numpy(float) / peak.to_numpy(float)))


def _per_dtype_text(by_word: dict[int, Peaks]) -> str | None:
    """The summary's word on a mixed-precision trace's peaks: each dtype's, by FLOPs done."""
    if len(by_word) < 2:
        return None
    each = ", ".join(f"{_dtype(w)} {fmt_si(p.flops_s, 'FLOP/s')}" for w, p in by_word.items())
    return f"per dtype, each row against its own: {each} (peak compute: the first's)"


def _per_dtype_peaks(by_word: dict[int, Peaks]) -> dict[str, dict[str, float]]:
    """The summary's ``peak_flops_by_dtype`` on a mixed-precision trace: each dtype's compute
    peak, by FLOPs done (the report draws a roof for each); none on a trace of one dtype,
    whose ``peak_flops_s`` says it all."""
    each = {_dtype(w): float(p.flops_s) for w, p in by_word.items()}
    return {"peak_flops_by_dtype": each} if len(each) > 1 else {}


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
