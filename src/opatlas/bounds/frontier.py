"""The Pareto frontier of (buffer size, backing-store accesses), with the artifact's rules:
best accesses per buffer size, then only points that strictly improve on every smaller buffer.
Lookups are step functions: the bound at capacity B is the last point with buffer ≤ B."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from opatlas.bounds.einsum import Einsum
from opatlas.bounds.mapspace import Mapspace, TilingSpace, build_mapspace, mappings_of
from opatlas.bounds.prune import frontier_tilings, pareto_indices
from opatlas.errors import OpatlasError

# The exact search evaluates every tiling and, by dynamic programming, every loop order of it:
# Timeloop's "mappings". On 2 cores it covers about 6 M mappings/s for 3 ranks, 20-35 M/s for
# 4-7 (measured: 720720^3, 82 M mappings, 14 s; bmm 5040^4, 296 M, 13 s; a 5-rank Einsum,
# 5.2 G, 221 s), so this limit keeps a search to about a minute or two. The artifact's
# figures need at most 3.5 M (its GBMM template with G = 32).
DEFAULT_MAX_MAPPINGS = 500_000_000


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def checked_buffer(buffer: Any) -> float | int:
    """``buffer`` if it is a buffer size in words (a real number, not a bool, not NaN)."""
    if isinstance(buffer, bool | np.bool_) or not isinstance(buffer, numbers.Real):
        raise TypeError(f"buffer size must be a number of words (int or float), got "
                        f"{_describe(buffer)}")
    if math.isnan(buffer):
        raise ValueError("buffer size must be a number of words, got nan")
    return buffer


def checked_buffers(buffers: Any) -> np.ndarray:
    """``buffers`` as a numeric array, each element checked as :func:`checked_buffer`. An
    integer or float array is checked whole (NaN only); anything else element by element, as
    a list's bools would turn into 0 and 1 (``np.asarray([True, 4])`` is ``[1, 4]``)."""
    arr = np.asarray(buffers)
    typed = isinstance(buffers, np.ndarray | pd.Series | pd.Index)
    if typed and arr.dtype.kind in "iu":
        return arr
    if typed and arr.dtype.kind == "f":
        if np.isnan(arr).any():
            at = tuple(int(k) for k in np.argwhere(np.isnan(arr))[0])
            raise ValueError(f"buffer sizes must be numbers of words;{_element(at)} nan")
        return arr
    for at, value in np.ndenumerate(np.asarray(buffers, dtype=object)):
        try:
            checked_buffer(value)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"buffer sizes must be numbers of words;{_element(at)} "
                            f"{_describe(value)}") from None
    return arr.astype(float)


def _element(at: tuple[int, ...]) -> str:
    """Where a bad value is: " element 2 is", " element [1, 0] is", or " got" for a scalar."""
    if not at:
        return " got"
    return f" element {at[0] if len(at) == 1 else list(at)} is"


@dataclass
class Curve:
    """A step function of (buffer, accesses) points: ascending buffer, decreasing accesses."""

    buffer: np.ndarray     # words, ascending
    accesses: np.ndarray   # words, strictly decreasing
    label: str = ""

    def lookup(self, buffer: float) -> int | None:
        """Minimum attainable accesses with ``buffer`` words on chip.

        ``buffer`` is a real number (int, float or a NumPy number; not a bool, a string, None
        or NaN: those raise TypeError/ValueError naming the value). A size below the first
        point, zero and negative sizes included, fits no mapping: None. ``inf`` gives the
        last point's accesses (the compulsory minimum)."""
        b = checked_buffer(buffer)
        i = int(np.searchsorted(self.buffer, b, side="right")) - 1
        return None if i < 0 else int(self.accesses[i])

    def lookup_many(self, buffers: Any) -> np.ndarray:
        """:meth:`lookup` for each of ``buffers`` (float accesses; NaN where it is None).
        Every element must be a real number as :meth:`lookup` takes, else the error names
        the first bad one and its position."""
        b = checked_buffers(buffers)
        i = np.searchsorted(self.buffer, b, side="right") - 1
        return np.where(i < 0, np.nan, self.accesses[np.maximum(i, 0)].astype(float))

    @classmethod
    def pareto(cls, buffer: np.ndarray, accesses: np.ndarray, label: str = "") -> Curve:
        b, a = np.asarray(buffer, dtype=np.int64), np.asarray(accesses, dtype=np.int64)
        idx = pareto_indices(b, a)
        return cls(b[idx], a[idx], label)


@dataclass
class Frontier(Curve):
    """A single-Einsum bound: frontier points plus the problem's reference values."""

    einsum: Einsum | None = None
    mappings: list[dict[str, Any]] = field(default_factory=list)
    per_tensor: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    mapspace_size: int = 0
    tilings: int = 0
    imperfect: bool = False

    # -- reference values ---------------------------------------------------------------------
    @property
    def algo_min(self) -> int:
        return self.einsum.total_operand_size

    @property
    def algo_max(self) -> int:
        """(number of tensors)·MACs: every operand moved for every MAC (the artifact's
        dashed 'Algo max', 3·MACs for its two-input problems)."""
        return len(self.einsum.tensors) * self.einsum.macs

    @property
    def max_effectual_buffer(self) -> int:
        """The smallest buffer that attains the minimum accesses (the last frontier point)."""
        return int(self.buffer[-1])

    @property
    def max_effectual_ratio(self) -> float:
        return self.max_effectual_buffer / self.einsum.total_operand_size

    def oi(self, accesses: np.ndarray | int | None = None) -> np.ndarray:
        """Operational intensity in ops per byte: ``einsum.ops`` (inputs·MACs − |O|, so
        2·MACs − |O| for two inputs) / (accesses·word bytes)."""
        a = self.accesses if accesses is None else np.asarray(accesses)
        return self.einsum.ops / (a * self.einsum.word_bytes)

    # -- outputs ------------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """The tidy frontier: buffer and accesses (and the per-tensor columns) in words, oi in
        op/B, then the word size and buffer/accesses in bytes."""
        wb = self.einsum.word_bytes
        df = pd.DataFrame({"buffer": self.buffer, "accesses": self.accesses, "oi": self.oi(),
                           **byte_columns(self.buffer, self.accesses, wb)})
        for t in self.einsum.tensors:
            df[f"{t.name}_occupancy"] = [p[t.name][0] for p in self.per_tensor]
            df[f"{t.name}_accesses"] = [p[t.name][1] for p in self.per_tensor]
        df["mapping"] = [describe_mapping(m) for m in self.mappings]
        df.insert(0, "problem", self.einsum.name)
        return df

    def to_json(self) -> dict[str, Any]:
        return {
            "problem": self.einsum.name,
            "ranks": dict(self.einsum.ranks),
            "word_bytes": self.einsum.word_bytes,
            "units": {"buffer": "words", "accesses": "words", "oi": "op/B"},
            "points": [{"buffer": int(b), "accesses": int(a), "oi": float(o), "mapping": m}
                       for b, a, o, m in zip(self.buffer, self.accesses, self.oi(), self.mappings,
                                             strict=True)],
            "algo_min": self.algo_min,
            "algo_max": self.algo_max,
            "max_effectual_buffer": self.max_effectual_buffer,
            "max_effectual_ratio": self.max_effectual_ratio,
            "mapspace_size": self.mapspace_size,
            "tilings": self.tilings,
            "imperfect_tiling": self.imperfect,
        }

    def artifact_rows(self) -> list[list[Any]]:
        """Rows in the artifact's ``orojenesis.csv`` order (no header): OI, buffer, accesses,
        then (occupancy, accesses) per tensor (Weights, Inputs, Outputs), mapping, yaml path."""
        rows = []
        for i in range(len(self.buffer)):
            row: list[Any] = [float(self.oi()[i]), int(self.buffer[i]), int(self.accesses[i])]
            for t in self.einsum.tensors:
                row += list(self.per_tensor[i][t.name])
            row += [describe_mapping(self.mappings[i]), "None"]
            rows.append(row)
        return rows


def byte_columns(buffer: np.ndarray, accesses: np.ndarray, word_bytes: int
                 ) -> dict[str, Any]:
    """The columns every bound table carries after buffer and accesses in words: the word
    size, and buffer and accesses in bytes."""
    return {"word_bytes": word_bytes, "buffer_bytes": buffer * word_bytes,
            "accesses_bytes": accesses * word_bytes}


def describe_mapping(m: dict[str, Any]) -> str:
    loops = " ".join(f"{r}{m['dram'][r]}" for r in m["order"]) or "-"
    tiles = " ".join(f"{r}{t}" for r, t in m["tile"].items())
    return f"DRAM[{loops}] Buffer[{tiles}]"


class TooManyMappings(OpatlasError):
    """The search would evaluate more mappings than allowed (``frontier(max_mappings=...)``)."""

    def __init__(self, einsum: Einsum, tilings: int, mappings: int, limit: int) -> None:
        self.tilings, self.mappings, self.limit = tilings, mappings, limit
        super().__init__(f"{einsum.name}: the exact search covers {mappings:,} mappings "
                         f"({tilings:,} tilings, each with its loop orders), above the limit of "
                         f"{limit:,} (max_mappings)")


def divisor_count(n: int) -> int:
    """How many divisors ``n`` has, from its prime factorisation (fast for the composite sizes
    that make big spaces; a large prime factor costs what listing the divisors does)."""
    count, p = 1, 2
    while p * p <= n:
        k = 0
        while n % p == 0:
            n, k = n // p, k + 1
        count *= k + 1
        p += 1 if p == 2 else 2
    return count * (2 if n > 1 else 1)


def ceil_tile_count(n: int) -> int:
    """How many distinct ``ceil(n / f)`` there are for f = 1 .. n (the imperfect tiles of a
    rank of n): ``floor((n − 1) / f)`` takes 2·r − [r·(r + 1) > n − 1] values ≥ 1, with
    r = isqrt(n − 1), and one more (0, tile 1) at f = n."""
    if n == 1:
        return 1
    m = n - 1
    r = math.isqrt(m)
    return 2 * r - (r * (r + 1) > m) + 1


def search_size(einsum: Einsum, *, imperfect: bool = False) -> tuple[int, int]:
    """(tilings, mappings) the exact search covers, counted without listing them: the product
    of the ranks' tile counts, and Timeloop's mapspace size, Σ over tilings of (non-unit DRAM
    loops)! (as :meth:`TilingSpace.mapping_count`: the tilings with j non-unit loops are a
    coefficient of Π (1 + (tiles − 1)·x), each rank's whole-rank tile being its unit loop)."""
    count = ceil_tile_count if imperfect else divisor_count
    tiles = [count(n) for n in einsum.ranks.values() if n > 1]
    return math.prod(tiles), mappings_of(tiles)


Report = Callable[[int, int], None]  # (tilings searched, all tilings)


@dataclass(frozen=True)
class _Reporting(TilingSpace):
    """A tiling space that says how far the search has got. The pruned search streams the
    tilings in ascending number, chunk by chunk, each through :meth:`tiles`: the first number
    asked for is how many tilings are done."""

    report: Callable[[int], None] | None = None

    def tiles(self, flat: np.ndarray) -> np.ndarray:
        flat = np.asarray(flat, dtype=np.int64)
        if self.report is not None and len(flat):
            self.report(int(flat.min()))
        return super().tiles(flat)


def _watched(space: TilingSpace, progress: Report) -> _Reporting:
    """``space`` calling ``progress(done, total)`` each time the search gets further."""
    reached = [0]

    def report(done: int) -> None:
        if done > reached[0]:
            reached[0] = done
            progress(done, space.size)

    progress(0, space.size)
    return _Reporting(space.einsum, space.ranks, space.cands, space.imperfect, space.resident,
                      report)


def frontier(einsum: Einsum, *, imperfect: bool = False,
             resident: frozenset[str] | set[str] = frozenset(),
             max_mappings: int | None = None, progress: Report | None = None) -> Frontier:
    """Compute the exact frontier of ``einsum`` (see :mod:`opatlas.bounds.mapspace`), streaming
    the tilings and pruning those that cannot be on it (:mod:`opatlas.bounds.prune`).
    Anything but an :class:`Einsum` is a TypeError (an Einsum checks its own sizes).

    ``max_mappings``: refuse (:class:`TooManyMappings`, before any work) a search over more
    mappings than this (:func:`search_size`); None: no limit. ``progress(done, total)`` hears
    how many of the tilings have been searched, as the search goes."""
    if not isinstance(einsum, Einsum):
        raise TypeError(f"frontier() takes an Einsum (e.g. gemm(M, K, N)), got "
                        f"{_describe(einsum)}")
    if max_mappings is not None:
        tilings, mappings = search_size(einsum, imperfect=imperfect)
        if mappings > max_mappings:
            raise TooManyMappings(einsum, tilings, mappings, max_mappings)
    space = TilingSpace.of(einsum, imperfect=imperfect, resident=resident)
    flat = np.sort(frontier_tilings(space if progress is None else _watched(space, progress)))
    if progress is not None:
        progress(space.size, space.size)
    ms = build_mapspace(einsum, imperfect=imperfect, resident=resident, tiles=space.tiles(flat))
    return frontier_from_mapspace(ms, tilings=space.size, mapspace_size=space.mapping_count())


def frontier_from_mapspace(ms: Mapspace, *, tilings: int | None = None,
                           mapspace_size: int | None = None) -> Frontier:
    """The frontier of the tilings of ``ms``; ``tilings`` and ``mapspace_size`` say how big the
    whole space was when ``ms`` holds only some of it."""
    idx = pareto_indices(ms.buffer, ms.accesses)
    mappings, per_tensor = [], []
    for i in idx:
        tile = {r: int(ms.einsum.ranks[r]) for r in ms.einsum.ranks}
        tile.update({r: int(ms.tiles[i, k]) for k, r in enumerate(ms.ranks)})
        dram = {r: int(ms.factors[i, k]) for k, r in enumerate(ms.ranks)}
        mappings.append({"tile": tile, "dram": dram, "order": ms.order(int(i))})
        acc = ms.tensor_accesses(int(i))
        per_tensor.append({t.name: (int(ms.occupancy[t.name][i]), acc[t.name])
                           for t in ms.einsum.tensors})
    return Frontier(buffer=ms.buffer[idx].astype(np.int64),
                    accesses=ms.accesses[idx].astype(np.int64), label=ms.einsum.name,
                    einsum=ms.einsum, mappings=mappings, per_tensor=per_tensor,
                    mapspace_size=ms.mapping_count() if mapspace_size is None else mapspace_size,
                    tilings=ms.size if tilings is None else tilings, imperfect=ms.imperfect)
