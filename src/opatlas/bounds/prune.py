"""The exact frontier of a big mapspace, streamed in bounded memory.

Highly composite sizes make millions of tilings (720720 has 240 divisors: a 720720³ GEMM has
240³ ≈ 14 M), and each needs an ``n·2^(n−1)``-step loop-order search. Few of them can be on
the frontier, and lower bounds show which cannot. The frontier strictly improves with the
buffer, so a tiling whose lower bound is no less than the exact accesses of some tiling with a
strictly smaller buffer is not on it. The loop-order search runs one subset size at a time, and
the cheapest orders of ``s`` innermost loops bound every order (its innermost ``s`` non-unit
loops cost at least that, every other step moves ≥ 0 words): tilings are dropped as soon as
that bound rules them out, most after a few of the ``n`` sizes. Tilings are evaluated CHUNK at
a time, each chunk against the exact frontier of the chunks before it.

Why the survivors' frontier is exactly the full one, ties included: every frontier tiling
survives (its accesses, and so its lower bound, are below those of every smaller buffer), and
a tiling off the frontier loses, among the survivors too, to the frontier point at or below its
buffer; ties at one buffer go to the lowest tiling number, as in the exhaustive search.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from opatlas.bounds.mapspace import (
    Mapspace,
    TilingSpace,
    base_accesses,
    best_order_accesses,
    dp_level,
    evaluate,
    loop_words,
)

CHUNK = 1 << 15  # tilings evaluated at once (memory: a few dozen arrays of this length)
_NONE = np.iinfo(np.int64).max
SEEDS = 8  # tilings searched first for a single buffer size's threshold


def pareto_indices(buffer: np.ndarray, accesses: np.ndarray) -> np.ndarray:
    """Indices of the frontier points, ascending buffer, strictly decreasing accesses."""
    order = np.lexsort((accesses, buffer))
    b, a = buffer[order], accesses[order]
    first = np.ones(len(b), dtype=bool)
    first[1:] = b[1:] != b[:-1]  # best accesses per buffer size
    order, a = order[first], a[first]
    prev_min = np.minimum.accumulate(np.concatenate(([_NONE], a[:-1])))
    return order[a < prev_min]


def survivors(ms: Mapspace, threshold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tilings of ``ms`` that may go below ``threshold``, with their exact accesses.

    The loop-order search runs one subset size ``s`` at a time; after each, the cheapest
    orders of ``s`` innermost loops bound every order from below (its innermost ``s``
    non-unit loops cost at least that, the other steps ≥ 0), and the tilings whose bound
    reaches their threshold are dropped before the next size."""
    n = len(ms.ranks)
    rows, base = np.arange(ms.size), base_accesses(ms)
    if n == 0:
        keep = np.flatnonzero(base < threshold)
        return rows[keep], base[keep]
    nonunit = (ms.factors > 1).astype(np.int64) @ (1 << np.arange(n, dtype=np.int64))
    total = np.prod(ms.factors, axis=1)
    best: dict[int, np.ndarray] = {0: np.zeros_like(base)}
    prods: dict[int, np.ndarray] = {0: np.ones_like(base)}
    for size in range(1, n + 1):
        best, prods = dp_level(ms, size, best, prods, total)
        least = np.full(len(rows), _NONE, dtype=np.int64)
        for mask, cost in best.items():  # sets of non-unit loops, or holding all of them
            valid = ((mask & ~nonunit) == 0) | ((nonunit & ~mask) == 0)
            least = np.where(valid, np.minimum(least, cost), least)
        keep = np.flatnonzero(base + least < threshold)
        if len(keep) < len(rows):
            ms, rows, base, nonunit, total = (ms.subset(keep), rows[keep], base[keep],
                                              nonunit[keep], total[keep])
            threshold = threshold[keep]
            best = {m: v[keep] for m, v in best.items()}
            prods = {m: v[keep] for m, v in prods.items()}
    return rows, base + best[(1 << n) - 1]


def innermost_bound(ms: Mapspace) -> np.ndarray:
    """Accesses no loop order of each tiling goes below, cheaply: the first fetches plus the
    cheapest innermost non-unit loop's own steps."""
    factors = ms.factors
    total = np.prod(factors, axis=1)
    least = np.full(ms.size, _NONE, dtype=np.int64)
    for k in range(len(ms.ranks)):
        cost = loop_words(ms, k, 0, total // factors[:, k])
        least = np.where(factors[:, k] > 1, np.minimum(least, cost), least)
    return base_accesses(ms) + np.where(least == _NONE, 0, least)


class _Staircase:
    """Exact (buffer, accesses) points seen so far, as their own frontier."""

    def __init__(self) -> None:
        self.buffer = np.zeros(0, dtype=np.int64)
        self.accesses = np.zeros(0, dtype=np.int64)

    def add(self, buffer: np.ndarray, accesses: np.ndarray) -> None:
        b = np.concatenate((self.buffer, buffer))
        a = np.concatenate((self.accesses, accesses))
        keep = pareto_indices(b, a)
        self.buffer, self.accesses = b[keep], a[keep]

    def below(self, buffer: np.ndarray) -> np.ndarray:
        """The fewest accesses seen with a buffer strictly smaller than each ``buffer``."""
        i = np.searchsorted(self.buffer, buffer, side="left") - 1
        if not len(self.accesses):
            return np.full(len(buffer), _NONE, dtype=np.int64)
        return np.where(i < 0, _NONE, self.accesses[np.maximum(i, 0)])


def frontier_tilings(space: TilingSpace, chunk: int = CHUNK) -> np.ndarray:
    """The numbers of the tilings on the exact frontier of ``space``, ascending buffer."""
    stair = _Staircase()

    def search(ms: Mapspace) -> np.ndarray:
        threshold = stair.below(ms.buffer)
        if np.any(threshold == _NONE):  # nothing to prune against yet (the first chunk):
            seeds = pareto_indices(ms.buffer, innermost_bound(ms))  # likely good ones first
            found, accesses = survivors(ms.subset(seeds), threshold[seeds])
            stair.add(ms.buffer[seeds[found]], accesses)
            threshold = stair.below(ms.buffer)
        alive, accesses = survivors(ms, threshold)
        buffer = ms.buffer[alive]
        best = pareto_indices(buffer, accesses)
        stair.add(buffer[best], accesses[best])
        return alive[best]

    flat = _chunked(space, chunk, search)
    ms = evaluate(space, space.tiles(flat))
    return flat[pareto_indices(ms.buffer, best_order_accesses(ms))]


def _chunked(space: TilingSpace, chunk: int, pick: Callable[[Mapspace], np.ndarray]
             ) -> np.ndarray:
    """The tiling numbers ``pick`` keeps, chunk by chunk (rows of each chunk's evaluation),
    ascending."""
    kept = []
    for lo in range(0, space.size, chunk):
        flat = np.arange(lo, min(lo + chunk, space.size), dtype=np.int64)
        kept.append(flat[np.sort(pick(evaluate(space, space.tiles(flat))))])
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)


def least_accesses(space: TilingSpace, capacity: float, chunk: int = CHUNK) -> int | None:
    """The fewest accesses of any tiling whose buffer holds at most ``capacity`` words — the
    frontier's value there (``Frontier.lookup``) without building the frontier; None where no
    tiling fits. One threshold prunes everything: the best exact count found so far."""
    best = _NONE
    for lo in range(0, space.size, chunk):
        ms = evaluate(space, space.tiles(np.arange(lo, min(lo + chunk, space.size))))
        fits = np.flatnonzero(ms.buffer <= capacity)
        if not len(fits):
            continue
        ms = ms.subset(fits)
        if best == _NONE:  # a good first threshold: the tilings the cheap bound likes best
            seeds = np.argsort(innermost_bound(ms), kind="stable")[:SEEDS]
            best = int(survivors(ms.subset(seeds), np.full(len(seeds), _NONE))[1].min())
        found = survivors(ms, np.full(ms.size, best, dtype=np.int64))[1]
        best = min(best, int(found.min())) if len(found) else best
    return None if best == _NONE else best
