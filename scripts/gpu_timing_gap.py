"""How much of a small op's event-timed duration is GPU work (run ON a GPU machine): each op
timed with CUDA events (the sweep's default) and with the profiler's kernel sum, forward and
backward, at a few shapes of the ``llm-*`` sweep. A ratio well above 1 means the event interval
holds host time (the backward's launch by autograd), not kernels.

    python3 scripts/gpu_timing_gap.py
"""

from __future__ import annotations

import statistics

from opatlas.backends import get_backend
from opatlas.ops.registry import resolved_params

CASES = [
    ("residual_add", {"b": 1, "l": 2048, "dim": 2048}),
    ("residual_add", {"b": 4, "l": 4096, "dim": 8192}),
    ("rmsnorm", {"b": 1, "l": 2048, "dim": 4096}),
    ("rope", {"b": 1, "l": 4096, "dim": 4096, "h": 32, "mp": 1}),
    ("masked_softmax", {"b": 1, "l": 4096, "h": 24, "mp": 1}),
    ("cross_entropy", {"b": 1, "l": 4096, "vocab": 128256, "mp": 1}),
    ("moe", {"b": 1, "l": 2048, "dim": 4096, "ffn": 14336, "experts": 8, "top_k": 2,
             "gated": 1, "mp": 1}),
    ("linear", {"b": 1, "l": 2048, "dim": 4096, "role": "out", "mp": 1}),
]


def main() -> None:
    events, prof = get_backend("cuda"), get_backend("cuda", timing="profiler")
    events.start()
    print(f"{'op':16s} {'pass':4s} {'events µs':>10s} {'kernels µs':>10s} {'ratio':>6s}  shape")
    for name, shape in CASES:
        op, p = resolved_params(name, {**shape, "dtype": "bf16"})
        ev = events.measure(op, p, list(op.passes), 10, 3)
        pr = prof.measure(op, p, list(op.passes), 10, 3)
        for pass_ in op.passes:
            e, k = statistics.median(ev[pass_]) / 1e3, statistics.median(pr[pass_]) / 1e3
            print(f"{name:16s} {pass_:4s} {e:10.1f} {k:10.1f} {e / k:6.2f}  {shape}")


if __name__ == "__main__":
    main()
