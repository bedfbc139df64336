"""The two-level mapspace and its traffic model, evaluated for every tiling at once.

A mapping is a tile size per rank (the on-chip Buffer's factor, an exact divisor; or any
ceil-tile with ``imperfect=True``, which is beyond the artifact) and a loop order of the
backing-store (DRAM) loops over ``F_r = ceil(size_r / t_r)`` iterations. A ceil-tiling's last
tile of a rank is counted whole (padded: each fetch moves the full tile), so with
``imperfect=True`` a mapping's traffic is that of hardware moving fixed tiles, above the words
an exact edge tile would move.

Traffic follows Timeloop's legacy nest analysis with one tile per tensor: a tensor's tile is
fetched once, and again each time a DRAM loop step changes it; the new data is the *delta*
between consecutive tiles (the whole tile if it moved along two or more tensor dimensions,
the non-overlapping part if along exactly one — halo reuse for sliding windows; nothing if it
did not move). The read-write output costs ``2·fetches − |O|`` (first-read elision).

The step of loop ``r`` with the set ``I`` of loops inside it happens
``(F_r − 1)·Π_{q outside} F_q`` times, and what it moves depends only on ``(r, I)``. So the best
loop order per tiling is a shortest path over subsets of loops (dynamic programming,
``n·2^(n−1)`` vectorised steps) instead of ``n!`` orders — exact, not a heuristic.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from opatlas.bounds.einsum import Einsum, Tensor


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def ceil_tiles(n: int) -> list[int]:
    """Every tile size that gives a distinct number of ceil tiles (imperfect factorisation)."""
    return sorted({math.ceil(n / f) for f in range(1, n + 1)})


@dataclass
class Mapspace:
    """All tilings of a problem, with buffer occupancy and best-order accesses per tiling."""

    einsum: Einsum
    ranks: list[str]           # ranks with size > 1 (size-1 ranks never move anything)
    tiles: np.ndarray          # (n_maps, n_ranks) int64
    factors: np.ndarray        # (n_maps, n_ranks) int64 DRAM loop bounds
    occupancy: dict[str, np.ndarray]  # per tensor, tile footprint (words)
    buffer: np.ndarray         # Σ occupancy
    accesses: np.ndarray       # total backing-store accesses with the best loop order
    choice: dict[int, np.ndarray]  # DP argmin per subset mask -> outermost rank index
    imperfect: bool = False
    resident: frozenset[str] = frozenset()

    @property
    def size(self) -> int:
        return len(self.buffer)

    def mapping_count(self) -> int:
        """Timeloop's mapspace size: Σ over tilings of (number of non-unit DRAM loops)!."""
        nonunit = (self.factors > 1).sum(axis=1)
        fact = np.array([math.factorial(k) for k in range(len(self.ranks) + 1)], dtype=np.int64)
        return int(fact[nonunit].sum())

    def order(self, i: int) -> list[str]:
        """The best DRAM loop order (outermost first) of tiling ``i``, non-unit loops only."""
        mask = (1 << len(self.ranks)) - 1
        out = []
        while mask:
            r = int(self.choice[mask][i])
            out.append(self.ranks[r])
            mask &= ~(1 << r)
        return [r for r in out if self.factors[i, self.ranks.index(r)] > 1]

    def tensor_accesses(self, i: int) -> dict[str, int]:
        """Per-tensor backing-store accesses of tiling ``i`` under its best order."""
        order = self.order(i)
        idx = np.array([i])
        per = {}
        for t in self.einsum.tensors:
            if t.name in self.resident:
                per[t.name] = 0
                continue
            total = int(self.occupancy[t.name][i])
            inner = 0
            for r in reversed(order):
                k = self.ranks.index(r)
                total += int(_step_cost(self, idx, k, inner, t.name)[0])
                inner |= 1 << k
            size = self.einsum.tensor_size(t.name)
            per[t.name] = 2 * total - size if t.read_write else total
        return per


def build_mapspace(einsum: Einsum, *, imperfect: bool = False,
                   resident: frozenset[str] | set[str] = frozenset()) -> Mapspace:
    """Enumerate every tiling and find each one's best loop order and accesses.

    ``resident`` tensors stay on chip whole (occupancy |T|, no accesses) — used by fusion.
    """
    resident = frozenset(resident)
    ranks = [r for r, n in einsum.ranks.items() if n > 1]
    cands = [(ceil_tiles if imperfect else divisors)(einsum.ranks[r]) for r in ranks]
    if ranks:
        grids = np.meshgrid(*[np.asarray(c, dtype=np.int64) for c in cands], indexing="ij")
        tiles = np.stack([g.ravel() for g in grids], axis=1)
    else:
        tiles = np.ones((1, 0), dtype=np.int64)
    sizes = np.array([einsum.ranks[r] for r in ranks], dtype=np.int64)
    factors = -(-sizes // tiles) if ranks else tiles.copy()
    occupancy = {}
    for t in einsum.tensors:
        occupancy[t.name] = (np.full(len(tiles), t.size(einsum.ranks), dtype=np.int64)
                             if t.name in resident else _footprint(einsum, ranks, tiles, t.name))
    buffer = sum(occupancy.values())
    ms = Mapspace(einsum, ranks, tiles, factors, occupancy, buffer, np.zeros(0, np.int64), {},
                  imperfect, resident)
    ms.accesses = _best_order_accesses(ms)
    return ms


def _footprint(einsum: Einsum, ranks: list[str], tiles: np.ndarray, name: str) -> np.ndarray:
    return footprint(next(x for x in einsum.tensors if x.name == name), ranks, tiles)


def footprint(t: Tensor, ranks: list[str], tiles: np.ndarray) -> np.ndarray:
    """Words of tensor ``t`` covered by per-rank tiles ``tiles`` (one row per mapping, one
    column per rank of ``ranks``)."""
    out = np.ones(len(tiles), dtype=np.int64)
    for dim in t.dims:
        out *= extent(dim, ranks, tiles)
    return out


def extent(dim, ranks: list[str], tiles: np.ndarray) -> np.ndarray:
    """Extent of one tensor dimension (a sum of coefficient × rank) over per-rank tiles."""
    ext = np.ones(len(tiles), dtype=np.int64)
    for r, c in dim:
        if r in ranks:
            ext = ext + c * (tiles[:, ranks.index(r)] - 1)
    return ext


def _step_cost(ms: Mapspace, idx: np.ndarray | slice, k: int, inner: int, name: str) -> np.ndarray:
    """New words of tensor ``name`` moved by all steps of loop ``k`` with loops ``inner`` inside:
    (number of such steps) × (delta of one step)."""
    ranks, tiles, factors = ms.ranks, ms.tiles[idx], ms.factors[idx]
    n = len(tiles)
    outer = [q for q in range(len(ranks)) if q != k and not inner >> q & 1]
    steps = factors[:, k] - 1
    for q in outer:
        steps = steps * factors[:, q]
    t = next(x for x in ms.einsum.tensors if x.name == name)
    tile = ms.occupancy[name][idx]
    changed = np.zeros(n, dtype=np.int64)
    partial = np.zeros(n, dtype=np.int64)
    for dim in t.dims:
        shift = np.zeros(n, dtype=np.int64)
        for r, c in dim:
            if r not in ranks:
                continue
            q = ranks.index(r)
            if q == k:
                shift = shift + c * tiles[:, q]
            elif inner >> q & 1:
                shift = shift - c * tiles[:, q] * (factors[:, q] - 1)
        moved = shift != 0
        ext = extent(dim, ranks, tiles)
        changed += moved
        partial += np.where(moved, tile // ext * np.minimum(ext, np.abs(shift)), 0)
    delta = np.where(changed == 0, 0, np.where(changed == 1, partial, tile))
    return steps * delta


def _best_order_accesses(ms: Mapspace) -> np.ndarray:
    n = len(ms.ranks)
    movers = [t for t in ms.einsum.tensors if t.name not in ms.resident]
    base = np.zeros(ms.tiles.shape[0], dtype=np.int64)
    for t in movers:
        if t.read_write:
            base += 2 * ms.occupancy[t.name] - t.size(ms.einsum.ranks)
        else:
            base += ms.occupancy[t.name]
    if n == 0:
        return base
    best: dict[int, np.ndarray] = {0: np.zeros_like(base)}
    for size in range(1, n + 1):
        for members in itertools.combinations(range(n), size):
            mask = sum(1 << q for q in members)
            cand_best, cand_choice = None, None
            for k in members:
                inner = mask & ~(1 << k)
                cost = best[inner].copy()
                for t in movers:
                    c = _step_cost(ms, slice(None), k, inner, t.name)
                    cost += 2 * c if t.read_write else c
                if cand_best is None:
                    cand_best, cand_choice = cost, np.full(len(cost), k, dtype=np.int8)
                else:
                    better = cost < cand_best
                    cand_best = np.where(better, cost, cand_best)
                    cand_choice = np.where(better, np.int8(k), cand_choice)
            best[mask] = cand_best
            ms.choice[mask] = cand_choice
    return base + best[(1 << n) - 1]
