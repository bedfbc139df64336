"""A brute-force reference enumerator: plain Python, one mapping at a time, simulating the
backing-store loop nest iteration by iteration. Slow on purpose; it exists to check the fast
vectorised model exactly on small problems."""

from __future__ import annotations

import itertools
import math

from opatlas.bounds.einsum import Einsum, Tensor
from opatlas.bounds.mapspace import ceil_tiles, divisors


def _box(t: Tensor, start: dict[str, int], tile: dict[str, int]) -> list[tuple[int, int]]:
    """The tensor tile's bounding box: per dimension (first coordinate, extent)."""
    out = []
    for dim in t.dims:
        lo = sum(c * start[r] for r, c in dim)
        out.append((lo, sum(c * (tile[r] - 1) for r, c in dim) + 1))
    return out


def _delta(cur: list[tuple[int, int]], prev: list[tuple[int, int]] | None) -> int:
    size = math.prod(e for _, e in cur)
    if prev is None:
        return size
    moved = [d for d, (a, b) in enumerate(zip(cur, prev, strict=True)) if a[0] != b[0]]
    if not moved:
        return 0
    if len(moved) > 1:
        return size
    d = moved[0]
    overlap = max(0, cur[d][1] - abs(cur[d][0] - prev[d][0]))
    return size // cur[d][1] * (cur[d][1] - overlap)


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
            box = _box(t, start, tile)
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
