"""The reshard sweep exactly as the seed's final module (``reshard.py``, commit e2f450c215):
bf16, TILE layout in L1, ROW_MAJOR orientations, BLOCK/WIDTH/HEIGHT on both sides (H→H and
W→W dropped as "ignore"), every pair of distinct core grids x, y ∈ 1..8, shapes
[1, 1, 32·j, 32·i] for i, j ∈ 1..249, the tileable rule, the 1 MiB-per-core L1 rule, one
suite per (input grid, output grid, dtype), suites over 1,600 vectors downsampled by
``del v[::2]``. Validity is computed for a whole suite at once with numpy."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

TILE = 32
DATUM_SIZE = {"bfloat16": 2, "bfloat8_b": 1, "float32": 4}  # the seed's, for its L1 rule
# bytes of one 32x32 tile in each data format (tt-metal's TileSize; a NoC page): a bfp8_b tile
# is 1024 one-byte mantissas plus 64 bytes of shared exponents, one per 16 values
# (tt-metalium constants.hpp: BFLOAT8_B_TILE_HW = TILE_HW + 64)
TILE_BYTES = {"bfloat16": 2 * TILE * TILE, "bfloat8_b": TILE * TILE + 64,
              "float32": 4 * TILE * TILE}
STRATEGIES = ("BLOCK", "WIDTH", "HEIGHT")
ORIENTATION = "ROW_MAJOR"
GRID = range(1, 9)
SHAPE_STEPS = range(1, 250)  # i (width) and j (height) in 1..249
MAX_PER_SUITE = 1600
L1_BUDGET = 1024 * 1024  # bytes per core: the seed's conservative rule (real L1: 1464 KiB)
REASONS = ("Input tensor cannot be tiled", "Output tensor cannot be tiled", "ignore",
           "Will not fit in L1")


def grid_name(x: int, y: int) -> str:
    return f"{x}x{y}"


_GRID_TEXT = re.compile(r"\s*(\d+)\s*[xX]\s*(\d+)\s*")


def parse_grid(s: str) -> tuple[int, int]:
    """``"XxY"`` → ``(x, y)``; a ValueError naming the text unless both are positive integers
    (a zero side would divide by zero in the tiling rules)."""
    m = _GRID_TEXT.fullmatch(str(s))
    x, y = (int(m[1]), int(m[2])) if m else (0, 0)
    if x < 1 or y < 1:
        raise ValueError(f"grid {str(s)!r} is not XxY with two positive integers (e.g. 7x1)")
    return x, y


def parse_strategy(s: str) -> str:
    """A shard strategy exactly as the sweep names it; a ValueError naming the text and the
    known ones otherwise (lower case included: the CLI does not guess)."""
    if s in STRATEGIES:
        return s
    hint = f"; did you mean {str(s).upper()}?" if str(s).upper() in STRATEGIES else ""
    raise ValueError(f"unknown shard strategy {s!r}; expected one of {', '.join(STRATEGIES)}"
                     + hint)


def is_tilable(ht: np.ndarray | int, wt: np.ndarray | int, x: int, y: int, strategy: str) -> Any:
    """Every shard a whole number of tiles and all shards equal (``ht``, ``wt`` in tiles)."""
    if strategy == "BLOCK":
        return (wt % x == 0) & (ht % y == 0)
    if strategy == "HEIGHT":
        return ht % (x * y) == 0
    if strategy == "WIDTH":
        return wt % (x * y) == 0
    raise ValueError(f"unknown shard strategy {strategy!r}")


def fits_l1(ht: Any, wt: Any, x: int, y: int, dtype: str = "bfloat16", budget: int = L1_BUDGET,
            tile_bytes: int | None = None) -> Any:
    """The seed's rule: DATUM_SIZE·H·W ≤ 1 MiB · x · y, i.e. an even shard's bytes per core
    within ``budget``. The simulator passes the chip's L1 as ``budget`` and the data format's
    tile size as ``tile_bytes`` (default: the seed's DATUM_SIZE · 32 · 32)."""
    tile = DATUM_SIZE[dtype] * TILE * TILE if tile_bytes is None else tile_bytes
    return tile * ht * wt <= budget * x * y


def suite_name(in_grid: str, out_grid: str, dtype: str = "bfloat16") -> str:
    """tt-metal's suite name, ``f"{in}-{out}-{dtype}"`` with ``str(ttnn.bfloat16)``, i.e.
    ``"1x4-4x1-DataType.BFLOAT16"`` (what its fit_models.py selects)."""
    return f"{in_grid}-{out_grid}-DataType.{str(dtype).upper()}"


def shape_tiles(shape: Any) -> tuple[int, int]:
    """(height, width) in tiles of a tensor shape as ttnn shards it: every dim but the last
    folds into the height (``[6, 1, 1024, 2048]`` shards as ``[6144, 2048]``). A ValueError
    naming the shape unless it is two or more positive integers, the last two whole tiles."""
    dims = list(shape) if isinstance(shape, list | tuple | np.ndarray) else None
    if dims is None or len(dims) < 2:
        raise ValueError(f"shape {shape!r} is not a list of two or more dims")
    if not all(isinstance(d, int | np.integer) and not isinstance(d, bool) and d > 0
               for d in dims):
        raise ValueError(f"shape {dims} has a dim that is not a positive integer")
    if dims[-2] % TILE or dims[-1] % TILE:
        raise ValueError(f"shape {dims} is not a whole number of tiles")
    return int(np.prod(dims[:-1], dtype=object)) // TILE, int(dims[-1]) // TILE


def invalid_reason(ht: int, wt: int, gin: tuple[int, int], gout: tuple[int, int], sin: str,
                   sout: str, dtype: str = "bfloat16") -> str | None:
    """The seed's ``invalidate_vector``, rule by rule, for one vector."""
    if not is_tilable(ht, wt, *gin, sin):
        return REASONS[0]
    if not is_tilable(ht, wt, *gout, sout):
        return REASONS[1]
    if sin == sout and sin != "BLOCK":
        return REASONS[2]
    if not (fits_l1(ht, wt, *gin, dtype) and fits_l1(ht, wt, *gout, dtype)):
        return REASONS[3]
    return None


def shapes() -> tuple[np.ndarray, np.ndarray]:
    """(height tiles, width tiles) in the seed's order: i (width) outer, j (height) inner."""
    i, j = np.meshgrid(np.array(SHAPE_STEPS), np.array(SHAPE_STEPS), indexing="ij")
    return j.ravel(), i.ravel()


def grid_pairs(in_x: set[int] | None = None, in_y_min: int = 1) -> Iterator[tuple[tuple[int, int],
                                                                                   tuple[int, int]]]:
    """(input grid, output grid) in the seed's order; ``in_x``/``in_y_min`` as its -x/-y."""
    for gin, gout in itertools.product(itertools.product(GRID, GRID), repeat=2):
        if gin == gout or (in_x is not None and gin[0] not in in_x) or gin[1] < in_y_min:
            continue
        yield gin, gout


@dataclass
class Suite:
    """One suite's valid vectors (after downsampling) as arrays, plus its invalid counts."""

    gin: tuple[int, int]
    gout: tuple[int, int]
    sin: np.ndarray       # strategy index per vector
    sout: np.ndarray
    ht: np.ndarray
    wt: np.ndarray
    index: np.ndarray     # position in the suite's full cross product
    invalid: Counter[str]
    downsampled: int

    @property
    def name(self) -> str:
        return suite_name(grid_name(*self.gin), grid_name(*self.gout))

    def __len__(self) -> int:
        return len(self.ht)


def expand_suite(gin: tuple[int, int], gout: tuple[int, int], dtype: str = "bfloat16",
                 max_per_suite: int | None = MAX_PER_SUITE) -> Suite:
    """Cross product in the module's order (input strategy, output strategy, shape), the four
    invalidation rules with their reasons, then the every-other downsampling."""
    ht, wt = shapes()
    n = len(ht)
    keep_parts, invalid = [], Counter()
    for a, sin in enumerate(STRATEGIES):
        tin = is_tilable(ht, wt, *gin, sin)
        for b, sout in enumerate(STRATEGIES):
            tout = is_tilable(ht, wt, *gout, sout)
            ignore = sin == sout and sin != "BLOCK"
            l1 = fits_l1(ht, wt, *gin, dtype) & fits_l1(ht, wt, *gout, dtype)
            r0 = ~tin
            r1 = tin & ~tout
            r2 = tin & tout & ignore
            r3 = tin & tout & (not ignore) & ~l1
            for reason, mask in zip(REASONS, (r0, r1, r2, r3), strict=True):
                if int(mask.sum()):
                    invalid[reason] += int(mask.sum())
            ok = np.flatnonzero(tin & tout & (not ignore) & l1)
            keep_parts.append((a * 3 + b) * n + ok)
    idx = np.concatenate(keep_parts)
    kept = idx
    if max_per_suite is not None:
        while len(kept) > max_per_suite:
            kept = np.delete(kept, np.s_[::2])
    shape_i = kept % n
    pair = kept // n
    return Suite(gin, gout, pair // 3, pair % 3, ht[shape_i], wt[shape_i], kept, invalid,
                 len(idx) - len(kept))


def vector_params(s: Suite, k: int) -> dict:
    """The k-th vector of a suite with the seed's parameter names."""
    h, w = int(s.ht[k]) * TILE, int(s.wt[k]) * TILE
    return {"input_shape": [1, 1, h, w], "input_core_grid": grid_name(*s.gin),
            "output_core_grid": grid_name(*s.gout),
            "input_shard_strategy": STRATEGIES[int(s.sin[k])],
            "output_shard_strategy": STRATEGIES[int(s.sout[k])],
            "input_shard_orientation": ORIENTATION, "output_shard_orientation": ORIENTATION,
            "dtype": "bfloat16"}
