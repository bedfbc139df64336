"""The two-level mapspace and its traffic model, evaluated for many tilings at once.

A mapping is a tile size per rank (the on-chip Buffer's factor, an exact divisor; or any
ceil-tile with ``imperfect=True``, which is beyond the artifact) and a loop order of the
backing-store (DRAM) loops over ``F_r = ceil(size_r / t_r)`` iterations. With a ceil-tiling the
last tile of a rank is an *edge* tile of ``size_r − (F_r − 1)·t_r`` elements: the buffer holds
a whole tile (occupancy uses ``t_r``), but traffic counts only the tensor elements that exist,
so an edge tile moves just its valid part.

Traffic follows Timeloop's legacy nest analysis with one tile per tensor: a tensor's tile is
fetched once, and again each time a DRAM loop step changes it; the new data is the *delta*
between consecutive tiles (the whole tile if it moved along two or more tensor dimensions,
else the part of the new tile outside the old one — halo reuse for sliding windows; nothing if
it did not change). The read-write output costs ``2·fetches − |O|`` (first-read elision).

The step of loop ``r`` with the set ``I`` of loops inside it happens
``(F_r − 1)·Π_{q outside} F_q`` times, and what all those steps move together depends only on
``(r, I)``. So the best loop order per tiling is a shortest path over subsets of loops (dynamic
programming, ``n·2^(n−1)`` vectorised steps) instead of ``n!`` orders — exact, not a heuristic.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from opatlas.bounds.einsum import Einsum, Tensor

Geometry = tuple[tuple[tuple[int, int], ...], ...]  # per dim: (rank index, coefficient), ...


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def ceil_tiles(n: int) -> list[int]:
    """Every tile size that gives a distinct number of ceil tiles (imperfect factorisation)."""
    return sorted({math.ceil(n / f) for f in range(1, n + 1)})


@dataclass(frozen=True)
class TilingSpace:
    """Every tiling of a problem, numbered in C order over the ranks' candidate tiles and made
    only when asked for (a big space never sits in memory whole)."""

    einsum: Einsum
    ranks: tuple[str, ...]            # ranks with size > 1 (size-1 ranks never move anything)
    cands: tuple[np.ndarray, ...]     # candidate tiles per rank, ascending
    imperfect: bool = False
    resident: frozenset[str] = frozenset()

    @classmethod
    def of(cls, einsum: Einsum, *, imperfect: bool = False,
           resident: frozenset[str] | set[str] = frozenset()) -> TilingSpace:
        ranks = tuple(r for r, n in einsum.ranks.items() if n > 1)
        pick = ceil_tiles if imperfect else divisors
        cands = tuple(np.asarray(pick(einsum.ranks[r]), dtype=np.int64) for r in ranks)
        return cls(einsum, ranks, cands, imperfect, frozenset(resident))

    @property
    def size(self) -> int:
        return math.prod(len(c) for c in self.cands)

    def tiles(self, flat: np.ndarray) -> np.ndarray:
        """The tilings numbered ``flat``: (len(flat), n_ranks) tile sizes."""
        flat = np.asarray(flat, dtype=np.int64)
        if not self.ranks:
            return np.ones((len(flat), 0), dtype=np.int64)
        idx = np.unravel_index(flat, tuple(len(c) for c in self.cands))
        return np.stack([c[i] for c, i in zip(self.cands, idx, strict=True)], axis=1)

    def mapping_count(self) -> int:
        """Timeloop's mapspace size: Σ over tilings of (number of non-unit DRAM loops)!. Each
        rank has one tile (the whole rank) whose loop is unit, so the count of tilings with j
        non-unit loops is a coefficient of Π (1 + (candidates − 1)·x)."""
        return mappings_of([len(c) for c in self.cands])


def mappings_of(tile_counts: list[int]) -> int:
    """Timeloop's mapspace size of ranks with these tile counts: Σ over tilings of (number of
    non-unit DRAM loops)!. Each rank's whole-rank tile is its unit loop, so the tilings with j
    non-unit loops are a coefficient of Π (1 + (count − 1)·x)."""
    poly = [1]
    for c in tile_counts:
        poly = [a + (c - 1) * b for a, b in zip([*poly, 0], [0, *poly], strict=True)]
    return sum(coef * math.factorial(j) for j, coef in enumerate(poly))


@dataclass
class Mapspace:
    """Tilings of a problem, with buffer occupancy and best-order accesses per tiling."""

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
    extents: dict[str, list[np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return len(self.buffer)

    def mapping_count(self) -> int:
        """Timeloop's mapspace size: Σ over tilings of (number of non-unit DRAM loops)!."""
        nonunit = (self.factors > 1).sum(axis=1)
        fact = np.array([math.factorial(k) for k in range(len(self.ranks) + 1)], dtype=np.int64)
        return int(fact[nonunit].sum())

    def subset(self, rows: np.ndarray) -> Mapspace:
        """These tilings only (accesses and choices are not carried)."""
        return Mapspace(self.einsum, self.ranks, self.tiles[rows], self.factors[rows],
                        {k: v[rows] for k, v in self.occupancy.items()}, self.buffer[rows],
                        np.zeros(0, np.int64), {}, self.imperfect, self.resident,
                        {k: [e[rows] for e in v] for k, v in self.extents.items()})

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
        order = [self.ranks.index(r) for r in self.order(i)]
        one = self.subset(np.array([i]))
        per = {}
        for t in self.einsum.tensors:
            if t.name in self.resident:
                per[t.name] = 0
                continue
            total = int(self.occupancy[t.name][i])
            inner = 0
            for pos in range(len(order) - 1, -1, -1):
                k = order[pos]
                outer = np.array([math.prod(int(one.factors[0, q]) for q in order[:pos])])
                total += int(step_words(one, k, inner, t, outer)[0])
                inner |= 1 << k
            size = self.einsum.tensor_size(t.name)
            per[t.name] = 2 * total - size if t.read_write else total
        return per


def evaluate(space: TilingSpace, tiles: np.ndarray) -> Mapspace:
    """Factors, occupancy and buffer of the tilings ``tiles`` (accesses not yet searched).
    ``resident`` tensors stay on chip whole (occupancy |T|, no accesses) — used by fusion."""
    einsum, ranks = space.einsum, list(space.ranks)
    sizes = np.array([einsum.ranks[r] for r in ranks], dtype=np.int64)
    factors = -(-sizes // tiles) if ranks else tiles.copy()
    occupancy, extents = {}, {}
    for t in einsum.tensors:
        extents[t.name] = [extent(d, ranks, tiles) for d in t.dims]
        if t.name in space.resident:
            occupancy[t.name] = np.full(len(tiles), t.size(einsum.ranks), dtype=np.int64)
        else:
            occupancy[t.name] = math.prod(extents[t.name]) * np.ones(len(tiles), np.int64)
    buffer = sum(occupancy.values())
    return Mapspace(einsum, ranks, tiles, factors, occupancy, buffer, np.zeros(0, np.int64), {},
                    space.imperfect, space.resident, extents)


def build_mapspace(einsum: Einsum, *, imperfect: bool = False,
                   resident: frozenset[str] | set[str] = frozenset(),
                   tiles: np.ndarray | None = None) -> Mapspace:
    """Every tiling (or only ``tiles``) with each one's best loop order and accesses.

    This holds the whole space in memory: :func:`opatlas.bounds.frontier.frontier` streams
    big spaces instead (:mod:`opatlas.bounds.prune`)."""
    space = TilingSpace.of(einsum, imperfect=imperfect, resident=resident)
    ms = evaluate(space, space.tiles(np.arange(space.size)) if tiles is None else tiles)
    ms.accesses = best_order_accesses(ms, ms.choice)
    return ms


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


def geometry(ms: Mapspace, t: Tensor) -> Geometry:
    """Per dimension of ``t``, its (rank index, coefficient) terms over the mapspace's ranks."""
    return tuple(tuple((ms.ranks.index(r), c) for r, c in dim if r in ms.ranks) for dim in t.dims)


def step_words(ms: Mapspace, k: int, inner: int, t: Tensor, outer: np.ndarray) -> np.ndarray:
    """Words of tensor ``t`` moved by all steps of loop ``k`` with the loops of mask ``inner``
    inside it; ``outer`` is the product of the bounds of the loops outside it."""
    if ms.imperfect:
        return _edge_words(ms, k, inner, t, outer)
    return (ms.factors[:, k] - 1) * outer * _uniform_delta(ms, k, inner, t)


def _uniform_delta(ms: Mapspace, k: int, inner: int, t: Tensor) -> np.ndarray:
    """Words one step of loop ``k`` (loops ``inner`` inside) moves when every tile is whole."""
    tiles, factors, tile = ms.tiles, ms.factors, ms.occupancy[t.name]
    changed: np.ndarray | int = 0
    partial: np.ndarray | int = 0
    for dim, ext in zip(geometry(ms, t), ms.extents[t.name], strict=True):
        if len(dim) == 1 and dim[0][1] == 1:  # a plain rank: any move leaves the old tile
            q = dim[0][0]
            if q == k:
                changed, partial = changed + 1, partial + tile
            elif inner >> q & 1:
                moved = factors[:, q] > 1
                changed, partial = changed + moved, partial + np.where(moved, tile, 0)
            continue
        shift: np.ndarray | int = 0
        for q, c in dim:
            if q == k:
                shift = shift + c * tiles[:, q]
            elif inner >> q & 1:
                shift = shift - c * tiles[:, q] * (factors[:, q] - 1)
        if isinstance(shift, int):
            continue
        moved = shift != 0
        changed = changed + moved
        partial = partial + np.where(moved, tile // ext * np.minimum(ext, np.abs(shift)), 0)
    if isinstance(changed, int) and changed == 0:
        return np.zeros(len(tile), dtype=np.int64)
    return np.where(changed == 0, 0, np.where(changed == 1, partial, tile))


def _edge_words(ms: Mapspace, k: int, inner: int, t: Tensor, outer: np.ndarray) -> np.ndarray:
    """All steps of loop ``k`` (loops ``inner`` inside) with edge tiles moving only their valid
    elements. Each rank sits in at most one dimension of ``t``, so the sum over the steps of a
    product over dimensions is the product of per-dimension sums (:func:`_dim_sums`): the new
    tile's extents ``SE`` and its overlaps with the old tile ``SOV``. A tile moved along two or
    more dimensions is moved whole (``Π SE``), else its part outside the old one
    (``Π SE − Π SOV``), as the uniform model does."""
    geo = geometry(ms, t)
    used = [q for dim in geo for q, _ in dim]
    if len(used) != len(set(used)):
        raise ValueError(f"tensor {t.name}: a rank in two dimensions; the exact imperfect "
                         "(edge-tile) traffic model needs each rank in one dimension")
    factors = ms.factors
    mult = outer
    for q in used:  # the loops outside that index t are summed within their dimension
        if q != k and not inner >> q & 1:
            mult = mult // factors[:, q]
    if k not in used:
        mult = mult * (factors[:, k] - 1)
    moved: np.ndarray | int = 0
    se_all: np.ndarray | int = 1
    sov_all: np.ndarray | int = 1
    for dim in geo:
        se, sov, shift = _dim_sums(ms, dim, k, inner)
        moved = moved + (shift != 0)
        se_all, sov_all = se_all * se, sov_all * sov
    return mult * np.where(np.asarray(moved) >= 2, se_all, se_all - sov_all)


def _dim_sums(ms: Mapspace, dim: tuple[tuple[int, int], ...], k: int, inner: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over the steps of loop ``k`` (inner loops reset from their last, edge, tile to their
    first), summed over this dimension's loops outside: the new tile's extent, its overlap
    with the old tile, and the (uniform) shift of the tile's start."""
    n = len(ms.tiles)
    size = np.array([ms.einsum.ranks[r] for r in ms.ranks], dtype=np.int64)
    if len(dim) == 1 and dim[0][1] == 1:  # a plain rank: the sums in closed form
        q = dim[0][0]
        t_q, f_q = ms.tiles[:, q], ms.factors[:, q]
        if q == k:  # tiles 1 .. F-1, none overlapping the one before
            return size[q] - t_q, np.zeros(n, np.int64), t_q
        if inner >> q & 1:  # back to the first tile, which overlaps the last only if F = 1
            return t_q, np.where(f_q > 1, 0, t_q), -t_q * (f_q - 1)
        whole = np.full(n, size[q], dtype=np.int64)  # every tile, unchanged
        return whole, whole, np.zeros(n, np.int64)
    old = np.ones(n, dtype=np.int64)
    new = np.ones(n, dtype=np.int64)
    shift = np.zeros(n, dtype=np.int64)
    options = []  # per varying rank: (coefficient, [(old len, new len, how many steps)])
    for q, c in dim:
        t_q, f_q = ms.tiles[:, q], ms.factors[:, q]
        e_q = size[q] - (f_q - 1) * t_q
        if q == k:  # from tile j-1 (whole) to tile j: whole, or the edge at the last step
            shift = shift + c * t_q
            options.append((c, [(t_q, t_q, np.maximum(f_q - 2, 0)), (t_q, e_q, f_q >= 2)]))
        elif inner >> q & 1:  # reset: from the last (edge) tile back to the first
            shift = shift - c * t_q * (f_q - 1)
            old, new = old + c * (e_q - 1), new + c * (t_q - 1)
        else:  # outside: the same tile before and after, any of the rank's tiles
            options.append((c, [(t_q, t_q, f_q - 1), (e_q, e_q, np.ones(n, np.int64))]))
    se = np.zeros(n, dtype=np.int64)
    sov = np.zeros(n, dtype=np.int64)
    for combo in itertools.product(*(opts for _, opts in options)):
        weight = np.ones(n, dtype=np.int64)
        e_old, e_new = old, new
        for (c, _), (lo, ln, w) in zip(options, combo, strict=True):
            weight = weight * w
            e_old, e_new = e_old + c * (lo - 1), e_new + c * (ln - 1)
        overlap = np.minimum(e_old, shift + e_new) - np.maximum(shift, 0)
        se += weight * e_new
        sov += weight * np.maximum(overlap, 0)
    return se, sov, shift


def base_accesses(ms: Mapspace) -> np.ndarray:
    """The first fetch of every moving tensor (the output's read of it elided)."""
    base = np.zeros(ms.size, dtype=np.int64)
    for t in ms.einsum.tensors:
        if t.name in ms.resident:
            continue
        if t.read_write:
            base += 2 * ms.occupancy[t.name] - t.size(ms.einsum.ranks)
        else:
            base += ms.occupancy[t.name]
    return base


def loop_words(ms: Mapspace, k: int, inner: int, outer: np.ndarray) -> np.ndarray:
    """Accesses of all steps of loop ``k`` (loops ``inner`` inside) over the moving tensors,
    the read-write output's twice (each new output word is read and written back)."""
    cost = np.zeros(ms.size, dtype=np.int64)
    for t in ms.einsum.tensors:
        if t.name not in ms.resident:
            c = step_words(ms, k, inner, t, outer)
            cost += 2 * c if t.read_write else c
    return cost


def best_order_accesses(ms: Mapspace, choice: dict[int, np.ndarray] | None = None
                        ) -> np.ndarray:
    """Accesses of each tiling under its best loop order; with ``choice``, the argmin of
    every subset is recorded there (for :meth:`Mapspace.order`)."""
    n = len(ms.ranks)
    base = base_accesses(ms)
    if n == 0:
        return base
    total = np.prod(ms.factors, axis=1)
    best: dict[int, np.ndarray] = {0: np.zeros_like(base)}
    prods: dict[int, np.ndarray] = {0: np.ones_like(base)}
    for size in range(1, n + 1):
        best, prods = dp_level(ms, size, best, prods, total, choice)
    return base + best[(1 << n) - 1]


def dp_level(ms: Mapspace, size: int, best: dict[int, np.ndarray],
             prods: dict[int, np.ndarray], total: np.ndarray,
             choice: dict[int, np.ndarray] | None = None
             ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """One subset size of the loop-order search: from the cheapest orders of every set of
    ``size − 1`` innermost loops (``best``, and the products of their bounds ``prods``), those
    of every set of ``size``. ``total`` is the product of all bounds."""
    factors = ms.factors
    level_best, level_prods = {}, {}
    for members in itertools.combinations(range(len(ms.ranks)), size):
        mask = sum(1 << q for q in members)
        level_prods[mask] = prods[mask & ~(1 << members[-1])] * factors[:, members[-1]]
        outer = total // level_prods[mask]
        cand_best, cand_choice = None, None
        for k in members:
            inner = mask & ~(1 << k)
            cost = best[inner] + loop_words(ms, k, inner, outer)
            if cand_best is None:
                cand_best, cand_choice = cost, np.full(len(cost), k, dtype=np.int8)
            else:
                better = cost < cand_best
                cand_best = np.where(better, cost, cand_best)
                cand_choice = np.where(better, np.int8(k), cand_choice)
        level_best[mask] = cand_best
        if choice is not None:
            choice[mask] = cand_choice
    return level_best, level_prods
