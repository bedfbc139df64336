"""The estimated step laid out in time: per pipeline stage, each micro-batch's forward and
backward in the schedule's order (GPipe, 1F1B, interleaved 1F1B), then the exposed
data-parallel traffic and the optimizer step.

The estimator's model is kept exactly: every stage runs at the slowest stage's pace (its
per-micro-batch forward and backward, collectives and sends included), the blocks are
scheduled by their dependencies (a forward waits for the previous stage's, a backward for the
next stage's), and the idle time that leaves is the pipeline bubble. With that the span of the
timeline equals the estimate's step time: exactly for GPipe and 1F1B, and within a fraction of
a percent for interleaved schedules whose micro-batches are not a multiple of the stages.
The ops shown inside each block are the slowest stage's."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from opatlas.estimate.engine import Estimate
from opatlas.estimate.items import StepItem

LANES = ("compute", "tp", "ep", "dp", "p2p")
_COMM_LANE = {"tp_comm": "tp", "ep_comm": "ep", "p2p": "p2p", "dp_comm": "dp"}


@dataclass(frozen=True, slots=True)
class Block:
    """One slice of time on one lane of one stage. ``depth`` 0 is a schedule block (a
    micro-batch's forward or backward of one model chunk, a DP collective, the optimizer);
    depth 1 are the ops and collectives inside a block, which tile it exactly."""

    stage: int
    lane: str
    name: str
    micro_batch: int | None
    chunk: int
    kind: str  # fwd, bwd, dp, optimizer (depth 0) or the item's pass (depth 1)
    start_s: float
    dur_s: float
    depth: int = 0

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s


@dataclass(frozen=True)
class _Slice:
    name: str
    lane: str
    kind: str
    dur_s: float


def _micro_batch_slices(est: Estimate) -> dict[str, list[_Slice]]:
    """The slowest stage's work for one micro-batch, split into its forward and its backward
    (the recomputed forward runs in the backward), per item, in execution order."""
    nmb = est.config.micro_batches
    plc = 6 if est.config.parallel.recompute == "full" else 4  # collectives per layer
    first = any(it.name == "embedding" for it in est.items)
    fwd: list[_Slice] = []
    bwd: list[_Slice] = []
    for it in est.items:
        per_mb = it.time_s / nmb
        if it.category == "compute":
            (fwd if it.pass_ == "fwd" else bwd).append(_Slice(it.name, "compute", it.pass_, per_mb))
        elif it.category in ("tp_comm", "ep_comm"):
            calls = it.calls / nmb
            extra = 1.0 if (it.category == "tp_comm" and first) else 0.0  # the embedding's
            share = ((calls - extra) * 2 / plc + extra) / calls
            lane = _COMM_LANE[it.category]
            fwd.append(_Slice(it.name, lane, "comm", per_mb * share))
            bwd.append(_Slice(it.name, lane, "comm", per_mb * (1 - share)))
        elif it.category == "p2p":
            sends = it.calls / nmb  # 2 on a middle stage: activations on, gradients back
            share = 0.5 if sends > 1 else (1.0 if first else 0.0)
            fwd.append(_Slice("send activations", "p2p", "comm", per_mb * share))
            bwd.append(_Slice("send gradients", "p2p", "comm", per_mb * (1 - share)))
    fwd.sort(key=lambda s: s.name != "embedding")  # stable: the embedding runs first
    return {"fwd": [s for s in fwd if s.dur_s > 0], "bwd": [s for s in bwd if s.dur_s > 0]}


def schedule_order(schedule: str, stages: int, micro_batches: int, chunks: int,
                   stage: int) -> list[tuple[str, int, int]]:
    """The (pass, micro-batch, chunk) sequence one stage runs. GPipe: every forward, then every
    backward. 1F1B: ``stages − stage − 1`` warm-up forwards, then one forward one backward,
    then the remaining backwards. Interleaved (Narayanan et al. 2021): forwards go through
    micro-batches in groups of ``stages``, chunk by chunk; the warm-up is
    ``(stages − stage − 1)·2 + (chunks − 1)·stages`` forwards."""
    fwd = _chunked(micro_batches, chunks, stages, backward=False)
    bwd = _chunked(micro_batches, chunks, stages, backward=True)
    if schedule == "gpipe":
        return [("fwd", *k) for k in fwd] + [("bwd", *k) for k in bwd]
    total = len(fwd)
    if chunks == 1:
        warm = min(stages - stage - 1, total)
    else:
        warm = min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)
    order = [("fwd", *k) for k in fwd[:warm]]
    for i in range(total - warm):
        order += [("fwd", *fwd[warm + i]), ("bwd", *bwd[i])]
    return order + [("bwd", *k) for k in bwd[total - warm:]]


def _chunked(m: int, v: int, p: int, backward: bool) -> list[tuple[int, int]]:
    if v == 1:
        return [(mb, 0) for mb in range(m)]
    out = []
    for g0 in range(0, m, p):
        group = range(g0, min(m, g0 + p))
        for c in range(v):
            out += [(mb, v - 1 - c if backward else c) for mb in group]
    return out


def _simulate(est: Estimate, f: float, b: float) -> dict[tuple[str, int, int, int], float]:
    """Start time of every (pass, micro-batch, chunk, stage), each stage running its order and
    each block waiting for the blocks it depends on."""
    p = est.config.parallel
    pp, m = p.pp, est.config.micro_batches
    v = p.virtual_stages if p.schedule == "interleaved" else 1
    f, b = f / v, b / v
    orders = [schedule_order(p.schedule, pp, m, v, d) for d in range(pp)]
    pos, free = [0] * pp, [0.0] * pp
    done: dict[tuple[str, int, int, int], float] = {}  # end times
    start: dict[tuple[str, int, int, int], float] = {}
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for d in range(pp):
            while pos[d] < len(orders[d]):
                kind, mb, c = orders[d][pos[d]]
                dep = _dependency(kind, mb, c, d, pp, v)
                if dep is not None and dep not in done:
                    break
                t0 = max(free[d], done[dep] if dep is not None else 0.0)
                key = (kind, mb, c, d)
                start[key] = t0
                done[key] = free[d] = t0 + (f if kind == "fwd" else b)
                pos[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked")  # a bug, not a user error
    return start


def _dependency(kind: str, mb: int, c: int, d: int, pp: int,
                v: int) -> tuple[str, int, int, int] | None:
    if kind == "fwd":
        if d > 0:
            return ("fwd", mb, c, d - 1)
        return ("fwd", mb, c - 1, pp - 1) if c > 0 else None
    if d < pp - 1:
        return ("bwd", mb, c, d + 1)
    return ("bwd", mb, c + 1, 0) if c < v - 1 else ("fwd", mb, v - 1, pp - 1)


def _children(stage: int, mb: int, chunk: int, kind: str, start: float, slices: list[_Slice],
              scale: float) -> Iterator[Block]:
    t = start
    for s in slices:
        yield Block(stage, s.lane, s.name, mb, chunk, s.kind, t, s.dur_s * scale, depth=1)
        t += s.dur_s * scale


def step_timeline(est: Estimate) -> list[Block]:
    """Every block of the estimated step, stage by stage, in time order per lane."""
    p = est.config.parallel
    v = p.virtual_stages if p.schedule == "interleaved" else 1
    slices = _micro_batch_slices(est)
    f, b = (sum(s.dur_s for s in slices[k]) for k in ("fwd", "bwd"))
    starts = _simulate(est, f, b)
    blocks: list[Block] = []
    for (kind, mb, c, d), t0 in sorted(starts.items(), key=lambda kv: (kv[0][3], kv[1])):
        dur = (f if kind == "fwd" else b) / v
        blocks.append(Block(d, "compute", f"{kind} mb{mb}" + (f" c{c}" if v > 1 else ""), mb,
                            c, kind, t0, dur))
        blocks += _children(d, mb, c, kind, t0, slices[kind], 1.0 / v)
    end = max((bl.end_s for bl in blocks), default=0.0)
    for d in range(p.pp):
        blocks += list(_tail(est, d, end))
    return blocks


def _tail(est: Estimate, stage: int, t: float) -> Iterator[Block]:
    """After the pipeline drains: the gradient reduction, the optimizer step, then the
    parameter gather (ZeRO ≥ 1); only what the estimate leaves exposed."""
    tail: list[StepItem] = [it for it in est.items if it.category == "dp_comm"
                            and it.shape.get("role") == "gradients"]
    tail += [it for it in est.items if it.category == "optimizer"]
    tail += [it for it in est.items if it.category == "dp_comm"
             and it.shape.get("role") != "gradients"]
    for it in tail:
        lane = "compute" if it.category == "optimizer" else "dp"
        kind = "optimizer" if it.category == "optimizer" else "dp"
        label = it.name if kind == "optimizer" else f"{it.name} ({it.shape.get('role', 'dp')})"
        yield Block(stage, lane, label, None, 0, kind, t, it.time_s)
        t += it.time_s


def span_s(blocks: list[Block]) -> float:
    if not blocks:
        return 0.0
    return max(b.end_s for b in blocks) - min(b.start_s for b in blocks)
