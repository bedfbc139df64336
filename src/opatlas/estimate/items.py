"""The itemised step: every op, collective and schedule term of the slowest pipeline device,
each with its calls per step and its time, adding up to the step time. The estimator's
breakdown is the sum of these items by category, so the two can never disagree."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CATEGORIES = ("compute", "tp_comm", "ep_comm", "pp_bubble", "p2p", "dp_comm", "optimizer")


@dataclass(frozen=True, slots=True)
class OpTerm:
    """One op of a transformer layer, of the embedding or of the head: calls per layer (per
    micro-batch for the embedding and head) and seconds per call, forward and backward."""

    op: str
    where: str  # "layer", "embedding" or "head"
    count: int
    fwd_s: float
    bwd_s: float
    shape: Mapping[str, Any]
    recomputed: bool = False  # its forward runs again during the backward


@dataclass(frozen=True, slots=True)
class StepItem:
    """One row of the step: ``time_s`` is all its ``calls`` in one optimizer step."""

    name: str
    pass_: str  # fwd, bwd, recompute, comm, bubble or step
    category: str  # one of CATEGORIES
    calls: float
    time_s: float
    shape: Mapping[str, Any] = field(default_factory=dict)

    @property
    def time_per_call_s(self) -> float:
        return self.time_s / self.calls if self.calls else 0.0

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "pass": self.pass_, "category": self.category,
                "calls": self.calls, "time_s": self.time_s,
                "time_per_call_s": self.time_per_call_s, "shape": dict(self.shape)}


def op_items(terms: list[OpTerm], layers: int, micro_batches: int, first: bool,
             last: bool) -> list[StepItem]:
    """Forward, backward and recomputed-forward rows of one device's ops over a step."""
    out: list[StepItem] = []
    for t in terms:
        if (t.where == "embedding" and not first) or (t.where == "head" and not last):
            continue
        calls = float(micro_batches * t.count * (layers if t.where == "layer" else 1))
        out.append(StepItem(t.op, "fwd", "compute", calls, calls * t.fwd_s, t.shape))
        out.append(StepItem(t.op, "bwd", "compute", calls, calls * t.bwd_s, t.shape))
        if t.recomputed:
            out.append(StepItem(t.op, "recompute", "compute", calls, calls * t.fwd_s, t.shape))
    return out


def comm_item(name: str, category: str, calls: float, seconds_per_call: float,
              shape: Mapping[str, Any]) -> list[StepItem]:
    """A collective's row, or none when it takes no time (a group of one rank)."""
    if calls <= 0 or seconds_per_call <= 0:
        return []
    return [StepItem(name, "comm", category, calls, calls * seconds_per_call, shape)]


def breakdown_of(items: list[StepItem]) -> dict[str, float]:
    out = dict.fromkeys(CATEGORIES, 0.0)
    for it in items:
        out[it.category] += it.time_s
    return out
