"""A brute-force reference enumerator: plain Python, one mapping at a time, simulating the
backing-store loop nest iteration by iteration. Slow on purpose; it exists to check the fast
vectorised model exactly on small problems. An imperfect tiling's edge tiles hold only the
tensor elements that exist."""

from __future__ import annotations

import itertools
import math

from opatlas.bounds.einsum import Einsum, Tensor
from opatlas.bounds.mapspace import ceil_tiles, divisors


def _box(t: Tensor, start: dict[str, int], tile: dict[str, int],
         sizes: dict[str, int] | None = None) -> list[tuple[int, int]]:
    """The tensor tile's bounding box: per dimension (first coordinate, extent). With
    ``sizes``, a rank's tile stops at the rank's end (an imperfect tiling's edge tile)."""
    out = []
    for dim in t.dims:
        lo = sum(c * start[r] for r, c in dim)
        lens = {r: tile[r] if sizes is None else min(tile[r], sizes[r] - start[r])
                for r, _ in dim}
        out.append((lo, sum(c * (lens[r] - 1) for r, c in dim) + 1))
    return out


def _delta(cur: list[tuple[int, int]], prev: list[tuple[int, int]] | None) -> int:
    """Words the tile ``cur`` brings after ``prev``: all of it if it moved along two or more
    dimensions, else its part outside ``prev``."""
    size = math.prod(e for _, e in cur)
    if prev is None:
        return size
    moved = [d for d, (a, b) in enumerate(zip(cur, prev, strict=True)) if a[0] != b[0]]
    if len(moved) > 1:
        return size
    overlap = math.prod(max(0, min(a0 + e0, a1 + e1) - max(a0, a1))
                        for (a1, e1), (a0, e0) in zip(cur, prev, strict=True))
    return size - overlap


def mapping_accesses(einsum: Einsum, tile: dict[str, int], order: list[str]) -> dict[str, int]:
    """Simulate one mapping: per tensor backing-store accesses (output with first-read elision)."""
    factors = {r: math.ceil(n / tile[r]) for r, n in einsum.ranks.items()}
    return loop_nest_accesses(einsum, tile, [(r, factors[r], tile[r]) for r in order])


def loop_nest_accesses(einsum: Einsum, tile: dict[str, int],
                       loops: list[tuple[str, int, int]]) -> dict[str, int]:
    """Simulate the backing-store loops ``(rank, bound, stride)`` (outermost first; a rank may
    have several) over a tile, iteration by iteration: per tensor accesses, the output with
    first-read elision. Multi-level mappings flatten to this form for one tensor."""
    content = dict.fromkeys((t.name for t in einsum.tensors), 0)
    prev: dict[str, list[tuple[int, int]] | None] = dict.fromkeys(content)
    for idx in itertools.product(*(range(bound) for _, bound, _ in loops)):
        start = dict.fromkeys(einsum.ranks, 0)
        for (r, _, stride), i in zip(loops, idx, strict=True):
            start[r] += i * stride
        for t in einsum.tensors:
            box = _box(t, start, tile, einsum.ranks)
            content[t.name] += _delta(box, prev[t.name])
            prev[t.name] = box
    out = {}
    for t in einsum.tensors:
        out[t.name] = 2 * content[t.name] - t.size(einsum.ranks) if t.read_write else content[t.name]
    return out


def reference_points(einsum: Einsum, imperfect: bool = False) -> list[tuple[int, int]]:
    """Every (buffer, accesses) of every (tiling, order of non-unit DRAM loops)."""
    ranks = list(einsum.ranks)
    cands = [(ceil_tiles if imperfect else divisors)(einsum.ranks[r]) for r in ranks]
    points = []
    for combo in itertools.product(*cands):
        tile = dict(zip(ranks, combo, strict=True))
        buffer = sum(math.prod(e for _, e in _box(t, dict.fromkeys(ranks, 0), tile))
                     for t in einsum.tensors)
        nonunit = [r for r in ranks if math.ceil(einsum.ranks[r] / tile[r]) > 1]
        for order in itertools.permutations(nonunit) if nonunit else [()]:
            points.append((buffer, sum(mapping_accesses(einsum, tile, list(order)).values())))
    return points


def reference_frontier(einsum: Einsum, imperfect: bool = False) -> list[tuple[int, int]]:
    best: dict[int, int] = {}
    for b, a in reference_points(einsum, imperfect):
        best[b] = min(a, best.get(b, a))
    out, running = [], None
    for b in sorted(best):
        if running is None or best[b] < running:
            out.append((b, best[b]))
            running = best[b]
    return out
