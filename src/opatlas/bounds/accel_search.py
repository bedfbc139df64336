"""Local search over accelerator mappings: random draws rarely land on the best corner of the
mapspace, so from the best sampled mappings, move one prime factor at a time (and sometimes
swap two loops) and keep what lowers DRAM traffic."""

from __future__ import annotations

import numpy as np

from opatlas.bounds.accel import MappingSet, Nest, _keys, tensor_dram_accesses, valid_mask


def _total(nest: Nest, factors: np.ndarray, orders: dict[int, np.ndarray]) -> np.ndarray:
    return sum(tensor_dram_accesses(nest, t, factors, orders) for t in nest.einsum.tensors)


def _mutate(nest: Nest, factors: np.ndarray, orders: dict[int, np.ndarray],
            rng: np.random.Generator) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Each child moves one prime factor of one rank to another slot; a third of them also
    swap two loops of one ordered slot."""
    n, S, R = factors.shape
    f, o = factors.copy(), {s: v.copy() for s, v in orders.items()}
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
    if nest.ordered and R > 1:
        swap = np.flatnonzero(rng.random(n) < 1 / 3)
        slot = np.array(nest.ordered)[rng.integers(len(nest.ordered), size=len(swap))]
        a, b = rng.integers(R, size=len(swap)), rng.integers(R, size=len(swap))
        for s in nest.ordered:
            sel = swap[slot == s]
            aa, bb = a[slot == s], b[slot == s]
            tmp = o[s][sel, aa].copy()
            o[s][sel, aa] = o[s][sel, bb]
            o[s][sel, bb] = tmp
    return f, o


def _best_distinct(nest: Nest, f: np.ndarray, o: dict[int, np.ndarray], total: np.ndarray,
                   keep: int) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray]:
    _, first = np.unique(_keys(nest, f, o), axis=0, return_index=True)
    best = first[np.argsort(total[first], kind="stable")[:keep]]
    return f[best], {s: v[best] for s, v in o.items()}, total[best]


def local_search(ms: MappingSet, *, seed: int = 0, rounds: int = 40, width: int = 4000,
                 keep: int = 32, min_utilization: float = 0.0,
                 start: MappingSet | None = None) -> MappingSet:
    """Improve on the ``keep`` mappings with the fewest DRAM accesses: each round mutates
    ``width`` children (one prime factor moved, sometimes two loops swapped), keeps the valid
    ones, and carries the ``keep`` best distinct mappings on. Returns them, best first.

    ``start``: more mappings to begin from, e.g. the best found for a smaller buffer (still
    valid in a larger one), so the best never gets worse as the buffer grows; those not
    valid here are dropped."""
    nest, rng = ms.nest, np.random.default_rng(seed)
    if not len(ms):
        return ms
    top = np.argsort(ms.total, kind="stable")[:keep]
    f, o = ms.factors[top], {s: v[top] for s, v in ms.orders.items()}
    if start is not None and len(start) and start.factors.shape[1:] == f.shape[1:] \
            and start.orders.keys() == o.keys():
        ok = valid_mask(nest, start.factors, min_utilization)
        f = np.concatenate([f, start.factors[ok]])
        o = {s: np.concatenate([o[s], start.orders[s][ok]]) for s in o}
    total = _total(nest, f, o)
    for _ in range(rounds):
        pick = rng.integers(len(f), size=width)
        cf, co = _mutate(nest, f[pick], {s: v[pick] for s, v in o.items()}, rng)
        ok = valid_mask(nest, cf, min_utilization)
        cf, co = cf[ok], {s: v[ok] for s, v in co.items()}
        f = np.concatenate([f, cf])
        o = {s: np.concatenate([o[s], co[s]]) for s in o}
        total = np.concatenate([total, _total(nest, cf, co)])
        f, o, total = _best_distinct(nest, f, o, total, keep)
    f, o, total = _best_distinct(nest, f, o, total, keep)
    accesses = {t.name: tensor_dram_accesses(nest, t, f, o) for t in nest.einsum.tensors}
    return MappingSet(nest, f, o, accesses, ms.candidates + rounds * width)
