"""Pipeline stages and schedules."""

from __future__ import annotations

from dataclasses import dataclass


def partition_layers(layers: int, stages: int) -> list[int]:
    """Transformer layers per stage, as even as possible, summing to ``layers``; the extra
    layers go to the middle stages, since the first stage also holds the embedding and the
    last the output head and loss."""
    if not 1 <= stages <= layers:
        raise ValueError(f"cannot split {layers} layers into {stages} stages")
    base, extra = divmod(layers, stages)
    out = [base] * stages
    order = sorted(range(stages), key=lambda i: (i in (0, stages - 1), abs(i - (stages - 1) / 2)))
    for i in order[:extra]:
        out[i] += 1
    return out


@dataclass(frozen=True)
class Schedule:
    """Time of the pipeline for ``m`` micro-batches on ``p`` stages (``v`` chunks each)."""

    name: str
    p: int
    m: int
    v: int = 1

    def bubble_fraction(self) -> float:
        """Idle time over useful time: (p−1)/m for GPipe/AFAB and 1F1B, (p−1)/(v·m) interleaved."""
        return (self.p - 1) / (self.v * self.m)

    def time(self, stage_step: float) -> float:
        """``stage_step``: forward + backward of one micro-batch on the slowest stage."""
        return self.m * stage_step * (1.0 + self.bubble_fraction())

    def in_flight(self, stage: int = 0) -> float:
        """Micro-batches whose activations stage ``stage`` (0 first) holds at once: its warm-up
        forwards and one more, as Megatron-LM schedules them. GPipe: all ``m``. 1F1B: p − stage.
        Interleaved: (p − stage − 1)·2 + (v − 1)·p warm-up chunks, one chunk being 1/v of the
        stage's layers: p + (p − 1 − 2·stage)/v micro-batches, p·(1 + (p − 1)/(p·v)) on the
        first stage (Narayanan et al. 2021). Never more than the ``m`` there are."""
        if self.name == "gpipe":
            return float(self.m)
        if self.name == "interleaved":
            return min(self.m, self.p + (self.p - 1 - 2 * stage) / self.v)
        return float(min(self.m, self.p - stage))
