"""Local search over accelerator mappings: random draws rarely land on the best corner of the
mapspace, so from the best sampled mappings, move one or two prime factors at a time (and
sometimes swap two loops) and keep what lowers DRAM traffic.

Mappings are ranked by DRAM accesses, then by the MACs they keep busy (compute cycles), then
by age: of equals, the one found first stays. Many mappings share the fewest DRAM accesses
(where a factor sits below the DRAM-facing tiles does not change the traffic), so the
tie-break decides what the search keeps. Ranked by DRAM accesses alone, those ties fell to
``np.unique``'s sorted-key order, which puts unit factors in the outer slots (Simba's 16 PEs)
first: the kept set filled with copies of one mapping spread ever thinner over the MACs, the
search returned a mapping at 1/16 of the MACs beside a sampled one at all of them, and the
crowded-out mappings were the ones a better mapping was reachable from.
"""

from __future__ import annotations

import numpy as np

from opatlas.bounds.accel import (
    MappingSet,
    Nest,
    _keys,
    macs_used,
    tensor_dram_accesses,
    valid_mask,
)


def _total(nest: Nest, factors: np.ndarray, orders: dict[int, np.ndarray]) -> np.ndarray:
    return sum(tensor_dram_accesses(nest, t, factors, orders) for t in nest.einsum.tensors)


def _move_factor(nest: Nest, f: np.ndarray, rng: np.random.Generator) -> None:
    """Move, per mapping, one prime factor of a random rank to another slot (in place)."""
    n, S, R = f.shape
    rows = np.arange(n)
    k = rng.integers(R, size=n)
    movable = f[rows, :, k] > 1
    src = np.argmax(np.where(movable, rng.random((n, S)), -1.0), axis=1)
    dst = np.argmax(np.where(nest.allowed[:, k].T, rng.random((n, S)), -1.0), axis=1)
    value = f[rows, src, k]
    p = np.zeros(n, dtype=np.int64)
    for q in sorted({x for ps in nest.primes for x in ps}):
        p = np.where((p == 0) & (value % q == 0), q, p)
    move = movable.any(axis=1) & (src != dst) & (p > 0)
    f[rows[move], src[move], k[move]] //= p[move]
    f[rows[move], dst[move], k[move]] *= p[move]


def _swap_loops(nest: Nest, o: dict[int, np.ndarray], rng: np.random.Generator) -> None:
    """In a third of the mappings, swap two loops of one ordered slot (in place)."""
    n, R = len(next(iter(o.values()))), len(nest.ranks)
    swap = np.flatnonzero(rng.random(n) < 1 / 3)
    slot = np.array(nest.ordered)[rng.integers(len(nest.ordered), size=len(swap))]
    a, b = rng.integers(R, size=len(swap)), rng.integers(R, size=len(swap))
    for s in nest.ordered:
        sel = swap[slot == s]
        aa, bb = a[slot == s], b[slot == s]
        tmp = o[s][sel, aa].copy()
        o[s][sel, aa] = o[s][sel, bb]
        o[s][sel, bb] = tmp


def _mutate(nest: Nest, factors: np.ndarray, orders: dict[int, np.ndarray],
            rng: np.random.Generator) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Each child moves one prime factor of one rank to another slot; half of them move a
    second one, so that two slots can trade factors in one step (a full fan-out takes a
    factor only after giving one up, which one move cannot do while ``min_utilization``
    holds, and a tile can grow in one rank as it shrinks in another at equal capacity); a
    third of them also swap two loops of one ordered slot."""
    f, o = factors.copy(), {s: v.copy() for s, v in orders.items()}
    _move_factor(nest, f, rng)
    twice = np.flatnonzero(rng.random(len(f)) < 0.5)
    second = f[twice]
    _move_factor(nest, second, rng)
    f[twice] = second
    if nest.ordered and f.shape[2] > 1:
        _swap_loops(nest, o, rng)
    return f, o


def _rank(nest: Nest, f: np.ndarray, o: dict[int, np.ndarray], total: np.ndarray) -> np.ndarray:
    """Indices of the distinct mappings, best first: fewest DRAM accesses, then most MACs
    busy, then the one that comes first in ``f`` (parents before their children)."""
    _, first = np.unique(_keys(nest, f, o), axis=0, return_index=True)
    return first[np.lexsort((first, -macs_used(nest, f[first]), total[first]))]


def _best_distinct(nest: Nest, f: np.ndarray, o: dict[int, np.ndarray], total: np.ndarray,
                   keep: int) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray]:
    best = _rank(nest, f, o, total)[:keep]
    return f[best], {s: v[best] for s, v in o.items()}, total[best]


def local_search(ms: MappingSet, *, seed: int = 0, rounds: int = 40, width: int = 4000,
                 keep: int = 32, min_utilization: float = 0.0,
                 start: MappingSet | None = None) -> MappingSet:
    """Improve on the ``keep`` best mappings of ``ms``: each round mutates ``width`` children
    (one or two prime factors moved, sometimes two loops swapped), keeps the valid ones, and
    carries the ``keep`` best distinct mappings on. Returns them, best first, ranked by DRAM
    accesses, then MACs busy: the first is never worse than the best of ``ms`` in that order.

    ``start``: more mappings to begin from, e.g. the best found for a smaller buffer (still
    valid in a larger one), so the best never gets worse as the buffer grows; those not
    valid here are dropped."""
    nest, rng = ms.nest, np.random.default_rng(seed)
    if not len(ms):
        return ms
    f, o = ms.factors, ms.orders
    if start is not None and len(start) and start.factors.shape[1:] == f.shape[1:] \
            and start.orders.keys() == o.keys():
        ok = valid_mask(nest, start.factors, min_utilization)
        f = np.concatenate([f, start.factors[ok]])
        o = {s: np.concatenate([o[s], start.orders[s][ok]]) for s in o}
    f, o, total = _best_distinct(nest, f, o, _total(nest, f, o), keep)
    for _ in range(rounds):
        pick = rng.integers(len(f), size=width)
        cf, co = _mutate(nest, f[pick], {s: v[pick] for s, v in o.items()}, rng)
        ok = valid_mask(nest, cf, min_utilization)
        cf, co = cf[ok], {s: v[ok] for s, v in co.items()}
        f = np.concatenate([f, cf])
        o = {s: np.concatenate([o[s], co[s]]) for s in o}
        total = np.concatenate([total, _total(nest, cf, co)])
        f, o, total = _best_distinct(nest, f, o, total, keep)
    accesses = {t.name: tensor_dram_accesses(nest, t, f, o) for t in nest.einsum.tensors}
    return MappingSet(nest, f, o, accesses, ms.candidates + rounds * width)
