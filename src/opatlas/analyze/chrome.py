"""Read a Chrome trace written by ``torch.profiler`` (``.json`` or ``.json.gz``) into flat
arrays, and nest each thread's operator events (parent = the innermost enclosing event).

Parsed with orjson (or json) into plain lists: a 100k-event trace parses and nests in about a
second and a few hundred MB, where HolisticTraceAnalysis builds a much larger frame per rank
(see docs/analyze.md)."""

from __future__ import annotations

import gzip
import itertools
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from opatlas.errors import OpatlasError

CPU_OP_CATS = {"cpu_op", "operator", "Operator"}
KERNEL_CATS = {"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}


@dataclass
class Events:
    """One kind of "X" events, in arrays (times in µs as the trace has them)."""

    name: list[str]
    ts: np.ndarray
    dur: np.ndarray
    thread: np.ndarray  # an integer per (pid, tid)
    args: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.name)


def load_trace(path: Path) -> dict[str, Any]:
    """The trace's JSON object; one clear error for a missing, truncated or non-JSON file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise OpatlasError(f"{path}: no such trace file") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise OpatlasError(f"{path}: the gzip data is truncated or damaged ({exc}); it is not "
                           f"a readable profiler trace") from None
    try:
        import orjson

        doc = orjson.loads(raw)
    except ImportError:
        import json

        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise _not_json(path, exc) from None
    except ValueError as exc:  # orjson.JSONDecodeError derives from ValueError
        raise _not_json(path, exc) from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise OpatlasError(f"{path}: valid JSON but not a Chrome trace: it has no "
                           f"'traceEvents' list of events")
    return doc


def _not_json(path: Path, exc: Exception) -> OpatlasError:
    return OpatlasError(f"{path}: not valid JSON ({exc}); the trace is truncated or is not a "
                        f"Chrome trace written by torch.profiler (export_chrome_trace)")


def split_events(doc: dict[str, Any]) -> tuple[Events, Events, Events]:
    """(operator events, GPU kernels and copies, runtime launches)."""
    threads: dict[tuple[Any, Any], int] = {}
    parts: dict[str, tuple[list, list, list, list, list]] = {
        k: ([], [], [], [], []) for k in ("op", "kernel", "runtime")}
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        kind = ("op" if cat in CPU_OP_CATS else "kernel" if cat in KERNEL_CATS
                else "runtime" if cat in RUNTIME_CATS else None)
        if kind is None:
            continue
        name, ts, dur = e.get("name"), e.get("ts"), e.get("dur")
        if not isinstance(name, str) or not isinstance(ts, int | float) or \
                not isinstance(dur, int | float):
            continue
        key = (e.get("pid"), e.get("tid"))
        p = parts[kind]
        p[0].append(name)
        p[1].append(float(ts))
        p[2].append(max(0.0, float(dur)))
        p[3].append(threads.setdefault(key, len(threads)))
        p[4].append(e.get("args") or {})
    ops, kernels, runtime = (Events(p[0], np.asarray(p[1], float), np.asarray(p[2], float),
                                    np.asarray(p[3], np.int64), p[4]) for p in parts.values())
    return autocast_inputs(ops), kernels, runtime


AUTOCAST_TYPES = "opatlas: autocast input type"  # the outer event's own "Input type", kept
AUTOCAST_CONCRETE = "opatlas: autocast concrete inputs"  # its own "Concrete Inputs", kept


def autocast_inputs(ops: Events) -> Events:
    """``ops`` with each op that autocast re-dispatched given the input types it ran with.

    Under ``torch.autocast`` an op is recorded twice: the outer event with its inputs as the
    caller passed them (fp32 weights and activations), enclosing the casts (``aten::to``) and
    the same op called again, with the same shapes, on the cast inputs (bf16), which is what
    ran. The analyzer maps the outer event (it holds the casts' kernels too), so it takes the
    inner event's ``Input type``; the outer's own are kept under :data:`AUTOCAST_TYPES`.
    Found as an event of one thread whose start lies inside an event of the same name and
    ``Input Dims`` (ops of one thread nest or are disjoint) and whose input types differ."""
    groups: dict[tuple[int, str, str], list[int]] = {}
    for i, args in enumerate(ops.args):
        if "Input type" in args and args.get("Input Dims"):
            key = (int(ops.thread[i]), ops.name[i], str(args["Input Dims"]))
            groups.setdefault(key, []).append(i)
    ts = ops.ts - (ops.ts.min() if len(ops) else 0.0)  # relative: epoch µs lose the ns
    for idx in groups.values():
        if len(idx) < 2:
            continue
        idx.sort(key=lambda i: (ts[i], -ops.dur[i]))
        # innermost pair first, so that a chain of re-dispatches hands down the last types
        for outer, inner in reversed(list(itertools.pairwise(idx))):
            inside = ts[outer] <= ts[inner] < ts[outer] + ops.dur[outer]
            given, ran = ops.args[outer]["Input type"], ops.args[inner]["Input type"]
            if inside and _tensor_types(ops.args[outer]) != _tensor_types(ops.args[inner]):
                ops.args[outer] = {**ops.args[outer], "Input type": ran, AUTOCAST_TYPES: given}
            elif inside and _fills_in(ops.args[outer], ops.args[inner]):
                ops.args[outer] = {**ops.args[outer],
                                   "Concrete Inputs": ops.args[inner]["Concrete Inputs"],
                                   AUTOCAST_CONCRETE: ops.args[outer].get("Concrete Inputs")}
    return ops


def _fills_in(outer: dict[str, Any], inner: dict[str, Any]) -> bool:
    """Whether the re-dispatch's scalars add to the outer call's and change none: autocast's
    fp32 policy calls softmax(x, dim) again as softmax(x, dim, dtype=float), and the dtype
    sets the output's size."""
    given = list(outer.get("Concrete Inputs") or [])
    ran = list(inner.get("Concrete Inputs") or [])
    if len(given) != len(ran) or given == ran:
        return False
    return all(g in ("", r) for g, r in zip(given, ran, strict=True))


def _tensor_types(args: dict[str, Any]) -> list[Any]:
    """The ``Input type`` of an op's tensor inputs (those with dims), not of its scalars: the
    re-dispatch of an fp32-policy op (softmax) adds a scalar (its dtype), not a cast input."""
    dims = args.get("Input Dims") or []
    types = list(args.get("Input type") or [])
    return [t for d, t in zip(dims, types, strict=False) if isinstance(d, list) and d]


def nest(ev: Events) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, parent, self time): ``order`` sorts events by thread, start, longest first, so
    a parent comes before its children; ``parent[i]`` is the position (in ``order``) of the
    innermost event of the same thread enclosing event ``order[i]``, or -1 for a top-level
    event; ``self`` is its duration less its direct children's. A child that ends after its
    parent (timestamps rounded to the ns) is cut at the parent's end, so the self times of a
    top-level event's tree add up to its duration."""
    n = len(ev)
    order = np.lexsort((-ev.dur, ev.ts, ev.thread))
    # relative times: epoch µs (~1.7e15) keep only ~0.1 µs of precision in a float
    ts = ev.ts[order] - (ev.ts.min() if n else 0.0)
    end, thread = ts + ev.dur[order], ev.thread[order]
    parent = np.full(n, -1, dtype=np.int64)
    stack: list[int] = []
    prev_thread = -1
    ts_l, end_l, thr_l = ts.tolist(), end.tolist(), thread.tolist()
    for i in range(n):
        if thr_l[i] != prev_thread:
            stack.clear()
            prev_thread = thr_l[i]
        while stack and end_l[stack[-1]] <= ts_l[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
            end_l[i] = min(end_l[i], end_l[stack[-1]])  # a child never outlasts its parent
        stack.append(i)
    end = np.asarray(end_l)
    child_time = np.zeros(n)
    has = parent >= 0
    np.add.at(child_time, parent[has], end[has] - ts[has])
    self_time = np.maximum(0.0, (end - ts) - child_time)
    return order, parent, self_time
