"""A small mapper for multi-level spatial accelerators, on opatlas's exact traffic model.

Why a mapper of our own: AccelForge cannot be installed on Python 3.11 and returns one optimal
mapping per run, and ZigZag evaluates ≈ 50 mappings/s and finds no mapping at all with a
128-byte GlobalBuffer (``docs/accel_mappers.md`` has the measurements).

A mapping splits every rank of the Einsum into factors, one per *slot*: the temporal loops of
each memory level (``temporal: false`` levels have none) and each spatial fan-out dim, in
nest order (outermost first). Only the orders of the loops that sit above some tensor's first
on-chip keeper change DRAM traffic (DRAM's own loops, and those of levels a tensor bypasses),
so only those orders are sampled; orders further in move data on chip only.

DRAM traffic of a tensor follows :mod:`opatlas.bounds.mapspace` exactly: its DRAM-facing tile
(the loops of and below its first on-chip keeper, plus the spatial fan-outs above that keeper,
whose instances share one multicast fetch) is fetched once, then again by the delta of every
step of the temporal loops above it; the output costs ``2·fetches − |O|``. Mappings are drawn
at random (seeded): per mapping a Dirichlet weight per slot, then every prime factor of every
rank goes to a slot drawn with those weights; a mapping is valid when every fan-out and every
level's capacity holds, and duplicates are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from opatlas.bounds.arch import Arch
from opatlas.bounds.einsum import Einsum, Tensor
from opatlas.bounds.mapspace import extent, footprint


@dataclass(frozen=True)
class Slot:
    """One loop position per rank: a memory level's temporal loops or one spatial fan-out."""

    level: int
    name: str
    spatial: bool
    fanout: int = 0


@dataclass
class Nest:
    """The loop slots of an architecture for one Einsum, and what each tensor sees of them."""

    einsum: Einsum
    arch: Arch
    ranks: list[str]
    slots: list[Slot]
    start: dict[int, int]           # memory level -> first slot at or below it
    allowed: np.ndarray             # (n_slots, n_ranks) bool: may this rank use this slot
    keeper: dict[str, int]          # tensor -> its first on-chip keeper level
    above: dict[str, list[int]]     # tensor -> temporal slots above its keeper (outer first)
    tile_slots: dict[str, list[int]]  # tensor -> slots forming its DRAM-facing tile
    ordered: list[int] = field(default_factory=list)  # slots whose order can change DRAM traffic

    @property
    def primes(self) -> list[list[int]]:
        return [_prime_factors(self.einsum.ranks[r]) for r in self.ranks]


def build_nest(einsum: Einsum, arch: Arch) -> Nest:
    arch.check_tensors([t.name for t in einsum.tensors])
    ranks = [r for r, n in einsum.ranks.items() if n > 1]
    slots: list[Slot] = []
    start: dict[int, int] = {}
    allowed_rows = []
    for i, lv in enumerate(arch.levels):
        if lv.kind == "memory":
            start[i] = len(slots)
            if lv.temporal:
                slots.append(Slot(i, lv.name, False))
                allowed_rows.append([True] * len(ranks))
            continue
        for d in lv.dims:
            slots.append(Slot(i, f"{lv.name}.{d.name}", True, d.fanout))
            used = _tensor(einsum, d.reuse).ranks() if d.reuse else set()
            allowed_rows.append([r not in used for r in ranks])
    keeper, above, tile_slots = {}, {}, {}
    for t in einsum.tensors:
        lv = next(i for i, x in enumerate(arch.levels) if i > 0 and t.name in x.keeps)
        keeper[t.name] = lv
        outside = range(0, start[lv])
        above[t.name] = [s for s in outside if not slots[s].spatial]
        spatial_above = [s for s in outside if slots[s].spatial]
        if spatial_above and above[t.name] and min(spatial_above) < max(above[t.name]):
            raise arch.error(
                f"tensor {t.name!r} bypasses a level with temporal loops below a spatial "
                f"fan-out ({slots[min(spatial_above)].name}); the mapper supports fan-outs "
                f"above a tensor's first keeper only when no bypassed temporal loops sit "
                f"under them", key=f"levels.{lv}", value=arch.levels[lv].name)
        tile_slots[t.name] = spatial_above + list(range(start[lv], len(slots)))
    ordered = sorted({s for v in above.values() for s in v})
    return Nest(einsum, arch, ranks, slots, start, np.array(allowed_rows, dtype=bool).reshape(
        len(slots), len(ranks)), keeper, above, tile_slots, ordered)


def _tensor(einsum: Einsum, name: str) -> Tensor:
    return next(t for t in einsum.tensors if t.name == name)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


# -- the traffic and capacity model, vectorised over mappings ----------------------------------

def tile_of(factors: np.ndarray, slots: list[int]) -> np.ndarray:
    """Per-rank tile sizes: the product of the factors in ``slots`` (n_maps, n_ranks)."""
    return np.prod(factors[:, slots, :], axis=1) if slots else np.ones(
        (factors.shape[0], factors.shape[2]), dtype=np.int64)


def tensor_dram_accesses(nest: Nest, t: Tensor, factors: np.ndarray,
                         orders: dict[int, np.ndarray]) -> np.ndarray:
    """DRAM accesses (words) of tensor ``t`` for every mapping: first fetch of its DRAM-facing
    tile, plus the delta of every step of the temporal loops above it (Timeloop's legacy rule,
    as :func:`opatlas.bounds.mapspace.step_words`); outputs cost ``2·fetches − |O|``."""
    n, R = factors.shape[0], len(nest.ranks)
    rows = np.arange(n)
    tile = tile_of(factors, nest.tile_slots[t.name])
    size = footprint(t, nest.ranks, tile)
    # inner[s, r]: product of rank r's factors in every slot inside slot s (the loop's stride)
    inner = np.ones((len(nest.slots) + 1, n, R), dtype=np.int64)
    for s in range(len(nest.slots) - 1, -1, -1):
        inner[s] = inner[s + 1] * factors[:, s, :]
    loops = []  # (rank index, bound, stride), outermost first
    for s in nest.above[t.name]:
        for p in range(R):
            r = orders[s][:, p]
            loops.append((r, factors[rows, s, r], inner[s + 1][rows, r]))
    total = size.copy()
    outer = np.ones(n, dtype=np.int64)
    reset = np.zeros((len(loops) + 1, n, R), dtype=np.int64)  # displacement undone by inner loops
    for j in range(len(loops) - 1, -1, -1):
        r, bound, stride = loops[j]
        reset[j] = reset[j + 1]
        reset[j][rows, r] += stride * (bound - 1)
    dims_extent = [extent(d, nest.ranks, tile) for d in t.dims]
    for j, (r, bound, stride) in enumerate(loops):
        steps = (bound - 1) * outer
        outer = outer * bound
        changed = np.zeros(n, dtype=np.int64)
        partial = np.zeros(n, dtype=np.int64)
        for dim, ext in zip(t.dims, dims_extent, strict=True):
            shift = np.zeros(n, dtype=np.int64)
            for rank, c in dim:
                if rank not in nest.ranks:
                    continue
                k = nest.ranks.index(rank)
                shift += c * (np.where(r == k, stride, 0) - reset[j + 1][:, k])
            moved = shift != 0
            changed += moved
            partial += np.where(moved, size // ext * np.minimum(ext, np.abs(shift)), 0)
        delta = np.where(changed == 0, 0, np.where(changed == 1, partial, size))
        total += steps * delta
    return 2 * total - t.size(nest.einsum.ranks) if t.read_write else total


def level_bytes(nest: Nest, level: int, factors: np.ndarray) -> np.ndarray:
    """Bytes one instance of memory ``level`` holds: its kept tensors' tiles at its bits."""
    lv = nest.arch.levels[level]
    tile = tile_of(factors, list(range(nest.start[level], len(nest.slots))))
    bits = np.zeros(len(factors), dtype=np.int64)
    for t in nest.einsum.tensors:
        if t.name in lv.keeps:
            bits += footprint(t, nest.ranks, tile) * lv.bits.get(t.name, nest.arch.word_bits)
    return bits / 8


def valid_mask(nest: Nest, factors: np.ndarray, min_utilization: float = 0.0) -> np.ndarray:
    """Mappings whose fan-outs and capacities hold (and that busy enough of the MACs)."""
    ok = np.ones(len(factors), dtype=bool)
    used = np.ones(len(factors), dtype=np.int64)
    for s, slot in enumerate(nest.slots):
        if slot.spatial:
            per_slot = np.prod(factors[:, s, :], axis=1)
            ok &= per_slot <= slot.fanout
            used *= per_slot
    if min_utilization > 0:
        ok &= used >= min_utilization * nest.arch.macs
    for i, lv in enumerate(nest.arch.levels):
        if i > 0 and lv.kind == "memory":
            ok &= level_bytes(nest, i, factors) <= lv.size_bytes
    return ok


def macs_used(nest: Nest, factors: np.ndarray) -> np.ndarray:
    """MACs each mapping keeps busy: the product of its spatial factors."""
    spatial = [s for s, x in enumerate(nest.slots) if x.spatial]
    return np.prod(tile_of(factors, spatial), axis=1)


# -- sampling ----------------------------------------------------------------------------------

def sample_factors(nest: Nest, n: int, rng: np.random.Generator,
                   alpha: float = 0.4, spatial_boost: float = 8.0) -> np.ndarray:
    """``n`` random splits of every rank over the slots (n, n_slots, n_ranks).

    Per mapping, Dirichlet weights over the slots (half the mappings weigh the spatial slots
    ``spatial_boost`` times more, so that busy arrays are drawn too); every prime factor of
    every rank goes to a slot drawn with those weights. Factors beyond a fan-out move to the
    DRAM loops, which never makes an on-chip tile larger.
    """
    S, R = len(nest.slots), len(nest.ranks)
    factors = np.ones((n, S, R), dtype=np.int64)
    weights = rng.dirichlet(np.full(S, alpha), size=n)
    spatial = np.array([x.spatial for x in nest.slots])
    boost = np.where(rng.random(n) < 0.5, spatial_boost, 1.0)
    weights[:, spatial] *= boost[:, None]
    rows = np.arange(n)
    for k, primes in enumerate(nest.primes):
        w = weights * nest.allowed[:, k]
        cdf = np.cumsum(w / w.sum(axis=1, keepdims=True), axis=1)
        for p in primes:
            u = rng.random(n)[:, None]
            slot = np.minimum((cdf < u).sum(axis=1), S - 1)
            factors[rows, slot, k] *= p
    _fit_fanouts(nest, factors)
    return factors


def _fit_fanouts(nest: Nest, factors: np.ndarray) -> None:
    """Move prime factors out of over-full spatial slots into the DRAM loops (in place)."""
    primes = sorted({p for ps in nest.primes for p in ps})
    for s, slot in enumerate(nest.slots):
        if not slot.spatial:
            continue
        while True:
            over = np.flatnonzero(np.prod(factors[:, s, :], axis=1) > slot.fanout)
            if not len(over):
                break
            k = np.argmax(factors[over, s, :], axis=1)
            value = factors[over, s, k]
            p = np.zeros(len(over), dtype=np.int64)
            for q in primes:
                p = np.where((p == 0) & (value % q == 0), q, p)
            factors[over, s, k] //= p
            factors[over, 0, k] *= p


def sample_orders(nest: Nest, n: int, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """A random permutation of the ranks (outermost first) per ordered slot and mapping."""
    return {s: np.argsort(rng.random((n, len(nest.ranks))), axis=1) for s in nest.ordered}


def _keys(nest: Nest, factors: np.ndarray, orders: dict[int, np.ndarray]) -> np.ndarray:
    """One row per mapping that identifies it up to the order of unit loops."""
    parts = [factors.reshape(len(factors), -1)]
    for s in nest.ordered:
        bound = np.take_along_axis(factors[:, s, :], orders[s], axis=1)
        ranks = np.where(bound > 1, orders[s], -1)
        keep_first = np.argsort(ranks < 0, axis=1, kind="stable")
        parts.append(np.take_along_axis(ranks, keep_first, axis=1))
    return np.concatenate(parts, axis=1)


@dataclass
class MappingSet:
    """Valid, distinct mappings of one Einsum on one architecture, with their DRAM traffic."""

    nest: Nest
    factors: np.ndarray                 # (n, n_slots, n_ranks)
    orders: dict[int, np.ndarray]       # ordered slot -> (n, n_ranks) rank indices, outer first
    accesses: dict[str, np.ndarray]     # tensor -> DRAM accesses (words)
    candidates: int = 0                 # mappings drawn to find these

    def __len__(self) -> int:
        return len(self.factors)

    @property
    def total(self) -> np.ndarray:
        return sum(self.accesses.values())

    @property
    def macs_used(self) -> np.ndarray:
        return macs_used(self.nest, self.factors)

    def dram_footprint(self) -> np.ndarray:
        """Words of all tensors' DRAM-facing tiles together (the on-chip data DRAM feeds)."""
        return sum(footprint(t, self.nest.ranks, tile_of(self.factors, self.nest.tile_slots[
            t.name])) for t in self.nest.einsum.tensors)

    def describe(self, i: int) -> str:
        """``Level[rank factors] ...`` outermost first; ordered levels list loops outer first."""
        nest, parts = self.nest, []
        for s, slot in enumerate(nest.slots):
            idx = (self.orders[s][i] if s in self.orders else range(len(nest.ranks)))
            loops = [f"{nest.ranks[k]}{self.factors[i, s, k]}" for k in idx
                     if self.factors[i, s, k] > 1]
            parts.append(f"{slot.name}[{' '.join(loops) or '-'}]")
        return " ".join(parts)


def sample_mappings(einsum: Einsum, arch: Arch, n: int = 2000, *, seed: int = 0,
                    batch: int = 20000, max_candidates: int | None = None,
                    min_utilization: float = 0.0) -> MappingSet:
    """Draw random mappings until ``n`` valid distinct ones are found (or ``max_candidates``,
    default ``500·n``, were drawn: fewer are returned then, and ``candidates`` says so)."""
    nest = build_nest(einsum, arch)
    rng = np.random.default_rng(seed)
    limit = max_candidates if max_candidates is not None else 500 * n
    kept_f, kept_o, seen, drawn = [], [], set(), 0
    found = 0
    while found < n and drawn < limit:
        size = min(batch, limit - drawn)
        f = sample_factors(nest, size, rng)
        o = sample_orders(nest, size, rng)
        drawn += size
        ok = np.flatnonzero(valid_mask(nest, f, min_utilization))
        if not len(ok):
            continue
        keys = _keys(nest, f[ok], {s: v[ok] for s, v in o.items()})
        take = []
        for j, key in zip(ok, keys, strict=True):
            b = key.tobytes()
            if b not in seen:
                seen.add(b)
                take.append(j)
                if found + len(take) == n:
                    break
        kept_f.append(f[take])
        kept_o.append({s: v[take] for s, v in o.items()})
        found += len(take)
    factors = (np.concatenate(kept_f) if kept_f else
               np.ones((0, len(nest.slots), len(nest.ranks)), dtype=np.int64))
    orders = {s: (np.concatenate([o[s] for o in kept_o]) if kept_o else
                  np.zeros((0, len(nest.ranks)), dtype=np.int64)) for s in nest.ordered}
    accesses = {t.name: tensor_dram_accesses(nest, t, factors, orders)
                for t in einsum.tensors}
    return MappingSet(nest, factors, orders, accesses, drawn)


def compute_cycles(ms: MappingSet) -> np.ndarray:
    """Compute-bound cycles: MACs over the MACs the spatial mapping keeps busy."""
    return -(-ms.nest.einsum.macs // ms.macs_used)


def utilization(ms: MappingSet) -> np.ndarray:
    return ms.macs_used / ms.nest.arch.macs


__all__ = ["MappingSet", "Nest", "build_nest", "compute_cycles", "footprint", "level_bytes",
           "macs_used", "sample_mappings", "tensor_dram_accesses", "utilization", "valid_mask"]

