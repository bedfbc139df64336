"""Multi-Einsum chains (an FFN, an attention block): unfused composition, untiled fusion and
tiled fusion with the fusion-friendly mapping template (FFMT).

* Unfused: layers run one after another and share the buffer, so at capacity B the chain
  moves Σ_i bound_i(B) (accesses add at equal capacity; the buffer is not summed).
* Untiled fusion: intermediates stay on chip whole. The first layer skips its output traffic
  and holds |O| on chip, the last skips its input and holds |I|, a middle layer pays only its
  weights and holds |I| + |O|; then the layers are merged as above.
* Tiled fusion (FFMT): only the shared row rank M is tiled at the backing store, in M1 row tiles
  of M0 = M/M1 rows (M1 any divisor of M; the artifact's powers of two are those of a
  power-of-two M). Each layer keeps its weights resident
  (|W| once, |W| on chip) or re-streams them once per row tile (M1·|W|). Traffic is
  Σ weights + |I_first| + |O_last|; capacity follows the fusion-friendly mapping rule
  Σ resident weights + max_i (row panels of layer i: M0·K_i + M0·N_i, + 1 word for a
  streamed weight). The artifact's relaxations that also tile K or N of the end layers
  (``_allowk``/``_allown``, FLAT, FlashAttention orders) are not modelled.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from opatlas.bounds.einsum import Einsum, gemm
from opatlas.bounds.frontier import Curve, byte_columns, frontier
from opatlas.bounds.mapspace import divisors


@dataclass(frozen=True)
class GemmLayer:
    """One layer of a chain: [M, K] x [K, N] -> [M, N]."""

    M: int
    K: int
    N: int

    def einsum(self, word_bytes: int = 1) -> Einsum:
        return gemm(self.M, self.K, self.N, word_bytes)

    @property
    def weights(self) -> int:
        return self.K * self.N


def check_chain(layers: list[GemmLayer]) -> None:
    if not layers:
        raise ValueError("a chain needs at least one layer")
    for a, b in itertools.pairwise(layers):
        if a.M != b.M or a.N != b.K:
            raise ValueError(f"layers do not chain: {a} then {b} (need same M and N_i = K_(i+1))")


def ffn_chain(tokens: int, dim: int, ffn: int) -> list[GemmLayer]:
    return [GemmLayer(tokens, dim, ffn), GemmLayer(tokens, ffn, dim)]


def merge(curves: list[Curve], label: str = "") -> Curve:
    """Layers that share the buffer one after another: accesses add at equal capacity."""
    start = max(int(c.buffer[0]) for c in curves)
    grid = np.unique(np.concatenate([c.buffer[c.buffer >= start] for c in curves] + [[start]]))
    total = sum(c.lookup_many(grid) for c in curves)
    return Curve.pareto(grid, total.astype(np.int64), label)


def algo_min_unfused(layers: list[GemmLayer]) -> int:
    return sum(l.M * l.K + l.K * l.N + l.M * l.N for l in layers)


def algo_min_fused(layers: list[GemmLayer]) -> int:
    return sum(l.weights for l in layers) + layers[0].M * layers[0].K + layers[-1].M * layers[-1].N


def unfused(layers: list[GemmLayer], heads: int = 1) -> Curve:
    check_chain(layers)
    return _scaled(merge([frontier(l.einsum()) for l in layers], "unfused"), heads)


def untiled_fusion(layers: list[GemmLayer], heads: int = 1) -> Curve:
    check_chain(layers)
    if len(layers) == 1:
        return _scaled(Curve(frontier(layers[0].einsum()).buffer,
                             frontier(layers[0].einsum()).accesses, "untiled fusion"), heads)
    curves = []
    for i, layer in enumerate(layers):
        resident = set()
        if i > 0:
            resident.add("Inputs")
        if i < len(layers) - 1:
            resident.add("Outputs")
        f = frontier(layer.einsum(), resident=frozenset(resident))
        curves.append(Curve(f.buffer, f.accesses))
    return _scaled(merge(curves, "untiled fusion"), heads)


def tiled_fusion(layers: list[GemmLayer], heads: int = 1) -> Curve:
    check_chain(layers)
    M = layers[0].M
    row_tiles = divisors(M)
    io = layers[0].M * layers[0].K + layers[-1].M * layers[-1].N
    buffers, accesses = [], []
    for m1 in row_tiles:
        m0 = M // m1
        panels = [m0 * l.K + m0 * l.N for l in layers]
        for keep in itertools.product((True, False), repeat=len(layers)):
            acc = io + sum(l.weights * (1 if k else m1) for l, k in zip(layers, keep, strict=True))
            work = max(p + (0 if k else 1) for p, k in zip(panels, keep, strict=True))
            buf = sum(l.weights for l, k in zip(layers, keep, strict=True) if k) + work
            buffers.append(buf)
            accesses.append(acc)
    return _scaled(Curve.pareto(np.array(buffers), np.array(accesses), "tiled fusion (FFMT)"),
                   heads)


def envelope(curves: list[Curve], label: str = "best of") -> Curve:
    """The best of several schemes at every buffer size (the artifact's merge over slicings)."""
    return Curve.pareto(np.concatenate([c.buffer for c in curves]),
                        np.concatenate([c.accesses for c in curves]), label)


def _scaled(c: Curve, heads: int) -> Curve:
    """``heads`` independent copies run one after another: accesses scale, the buffer does not."""
    return Curve(c.buffer, c.accesses * heads, c.label)


def curves_frame(curves: list[Curve], word_bytes: int = 1) -> pd.DataFrame:
    """One row per point of every curve (``scheme``: its label): buffer and accesses in words,
    then the word size and both in bytes, as a single Einsum's table
    (:meth:`~opatlas.bounds.frontier.Frontier.to_frame`)."""
    return pd.concat([pd.DataFrame({"scheme": c.label, "buffer": c.buffer,
                                    "accesses": c.accesses,
                                    **byte_columns(c.buffer, c.accesses, word_bytes)})
                      for c in curves], ignore_index=True)
