"""Whole training runs: how many optimizer steps a token budget takes, and what they cost in
wall-clock days, GPU-hours and money, from the estimate of one step.

steps = ⌈tokens / (global batch · sequence length)⌉; days = steps · step time / 86,400;
GPU-hours = steps · step time · GPUs / 3,600; cost = GPU-hours · price per GPU-hour.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from opatlas.errors import OpatlasError
from opatlas.estimate.engine import Estimate

_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBGTP]?)\s*$", re.I)


def parse_count(text: str, what: str = "--tokens") -> float:
    """``"2T"`` -> 2e12, ``"300B"`` -> 3e11, ``"1.5e12"`` -> 1.5e12 (decimal suffixes)."""
    match = _COUNT.match(str(text))
    if not match or not 0 < float(match.group(1)) * _SUFFIX[match.group(2).upper()] < math.inf:
        raise OpatlasError(f"{what}: expected a positive number with an optional K, M, B, T "
                           f"suffix (e.g. 2T, 300B), got {text!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2).upper()]


@dataclass(frozen=True)
class RunEstimate:
    steps: int
    tokens: float
    days: float
    gpu_hours: float
    cost: float | None

    def as_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "tokens": self.tokens, "days": self.days,
                "gpu_hours": self.gpu_hours, "cost": self.cost}


def tokens_per_step(est: Estimate) -> int:
    return est.config.training.global_batch * est.config.model.seq_len


def whole_run(est: Estimate, tokens: float | None = None, steps: int | None = None,
              gpu_hour_price: float | None = None) -> RunEstimate:
    """The run of ``tokens`` tokens (rounded up to whole steps) or of ``steps`` steps."""
    if (tokens is None) == (steps is None):
        raise OpatlasError("a whole run needs either --tokens or --steps (not both)")
    if steps is None:
        steps = math.ceil(tokens / tokens_per_step(est))
    if steps <= 0:
        raise OpatlasError(f"--steps must be positive, got {steps}")
    if gpu_hour_price is not None and not 0 <= gpu_hour_price < math.inf:
        raise OpatlasError(f"--gpu-hour-price must be a finite price >= 0, got {gpu_hour_price}")
    seconds = steps * est.step_time_s
    gpu_hours = seconds * est.config.gpus / 3600.0
    return RunEstimate(steps, float(steps * tokens_per_step(est)), seconds / 86400.0, gpu_hours,
                       None if gpu_hour_price is None else gpu_hours * gpu_hour_price)


def rank_by_run(ests: list[Estimate], tokens: float | None = None, steps: int | None = None,
                gpu_hour_price: float | None = None) -> list[tuple[Estimate, RunEstimate]]:
    """Estimates with their runs, fastest run first: with a token budget, layouts that differ
    in tokens per step are compared on the time to train those tokens, not per step."""
    runs = [(e, whole_run(e, tokens, steps, gpu_hour_price)) for e in ests]
    return sorted(runs, key=lambda pair: pair[1].days)
