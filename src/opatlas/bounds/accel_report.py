"""Real mappings of an accelerator against the Orojenesis bound (the artifact's Fig. 24b).

For each size of one on-chip level (the artifact sweeps Simba's GlobalBuffer), draw valid
mappings with :mod:`opatlas.bounds.accel` and put each one's DRAM accesses beside the bound.

Two bounds are reported per mapping:

* ``bound_at_capacity``: the bound at the on-chip capacity between DRAM and the compute that
  the sweep accounts for, ``bound_capacity_bytes``: the swept level's size, as the artifact
  plots it, plus the sizes of the on-chip levels between it and DRAM (one instance each),
  which hold data for reuse too: swept alone, a 1-byte WeightRegister under a 64 KB
  GlobalBuffer would "bound" mappings that reuse data from those 64 KB. It is a lower bound
  of every mapping only when those levels are every tensor's first on-chip keepers. When a
  tensor bypasses them (Simba's weights stream from DRAM into 16 × 32 KB PE weight buffers,
  below the GlobalBuffer), mappings can and do go below it: the check counts them.
* ``bound_at_tile``: the bound at the mapping's *uniform tile*, the footprint of every tensor
  over all loops below DRAM. A tensor that bypasses a level keeps a subset of that tile on
  chip, so each DRAM iteration must still fetch at least the new part of the tile, which is
  what the two-level model charges for GEMM-like tensors (for sliding windows moving along two
  dims at once it charges the whole tile; there the floor is observed, not proved:
  ``docs/accel_mappers.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from opatlas.bounds.accel import (
    MappingSet,
    compute_cycles,
    footprint,
    level_bytes,
    sample_mappings,
    tile_of,
    utilization,
)
from opatlas.bounds.accel_search import local_search
from opatlas.bounds.arch import Arch, Level
from opatlas.bounds.einsum import Einsum
from opatlas.bounds.frontier import Frontier, frontier

FIG24B_SIZES_KB = (0.125, 1, 8, 64, 512)


@dataclass
class AccelSweep:
    """Every mapping of every swept size, with the bound beside it."""

    einsum: Einsum
    arch: Arch
    level: str
    frontier: Frontier
    points: pd.DataFrame
    requested: int
    notes: list[str] = field(default_factory=list)
    searched: pd.DataFrame | None = None  # the best mappings after local search, per size
    # the on-chip levels between ``level`` and DRAM -> their bytes (one instance each): the
    # bound is taken at each size plus their total
    above: dict[str, float] = field(default_factory=dict)

    def capacity_text(self) -> str:
        """What the bound's capacity is made of, for the footer and the plot's axis."""
        if not self.above:
            return f"{self.level} capacity"
        return (f"{self.level} capacity + {sum(self.above.values()):,.0f} B of "
                f"{', '.join(self.above)} (the on-chip levels between it and DRAM, one "
                f"instance each)")

    def best(self) -> pd.DataFrame:
        """The mapping with the fewest DRAM accesses per size, its gap to the bound, and how
        many of that size's mappings fall below the bound at the level's capacity."""
        rows = []
        for size, g in self.points.groupby("capacity_bytes", sort=True):
            b = g.sort_values(["dram_accesses", "compute_cycles"]).iloc[0]
            rows.append({
                "capacity_bytes": size, "mappings": len(g),
                "candidates": int(g["candidates"].iloc[0]),
                "bound_capacity_bytes": float(b["bound_capacity_bytes"]),
                "best_dram_accesses": int(b["dram_accesses"]),
                "bound_at_capacity": int(b["bound_at_capacity"]),
                "gap_to_bound": b["dram_accesses"] / b["bound_at_capacity"] - 1,
                "below_bound_at_capacity": int(g["below_bound_at_capacity"].sum()),
                "best_tile_words": int(b["tile_words"]),
                "gap_to_bound_at_tile": b["dram_accesses"] / b["bound_at_tile"] - 1,
                "below_bound_at_tile": int(g["below_bound_at_tile"].sum()),
                "best_utilization": float(b["utilization"]),
                "best_mapping": b["mapping"], **self._searched_best(size)})
        return pd.DataFrame(rows)

    def _searched_best(self, size: float) -> dict[str, Any]:
        if self.searched is None:
            return {}
        g = self.searched[self.searched["capacity_bytes"] == size]
        b = g.sort_values(["dram_accesses", "compute_cycles"]).iloc[0]
        return {"searched_dram_accesses": int(b["dram_accesses"]),
                "searched_gap_to_bound": b["dram_accesses"] / b["bound_at_capacity"] - 1,
                "searched_gap_to_bound_at_tile": b["dram_accesses"] / b["bound_at_tile"] - 1,
                "searched_utilization": float(b["utilization"]),
                "searched_mapping": b["mapping"]}

    def to_json(self) -> dict[str, Any]:
        return {"problem": self.einsum.name, "arch": self.arch.name, "level": self.level,
                "levels_above_bytes": self.above,
                "word_bytes": self.einsum.word_bytes, "mappings_per_size": self.requested,
                "best": self.best().to_dict(orient="records"), "notes": self.notes}


def sweep_buffer_sizes(einsum: Einsum, arch: Arch, *, level: str = "GlobalBuffer",
                       sizes_bytes: tuple[float, ...] | list[float] = tuple(
                           kb * 1024 for kb in FIG24B_SIZES_KB),
                       mappings: int = 2000, seed: int = 0, min_utilization: float = 0.0,
                       search_rounds: int = 0, bound: Frontier | None = None) -> AccelSweep:
    """Map ``einsum`` onto ``arch`` with ``level`` resized to each of ``sizes_bytes``; keep
    only mappings that use at least ``min_utilization`` of the MACs. With ``search_rounds``,
    a local search from each size's best mappings looks for better ones (``searched``).
    Each size's bound is taken at that size plus the on-chip levels above ``level``."""
    if arch.word_bits % 8:
        raise arch.error("word_bits must be a whole number of bytes", key="word_bits",
                         value=arch.word_bits)
    einsum = einsum.with_word_bytes(arch.word_bits // 8)
    need = _check_fits(einsum, arch, level, sizes_bytes)
    f = bound if bound is not None else frontier(einsum)
    above = levels_above(einsum, arch, level)
    extra = sum(above.values())
    frames, searched, notes = [], [], []
    found: dict[float, MappingSet] = {}  # size -> the best the search found there
    for k, size in enumerate(sizes_bytes):
        if size < need:
            notes.append(f"{level} {size:g} B: no mapping fits (it needs at least {need:g} B)")
            continue
        ms = sample_mappings(einsum, arch.with_size(level, size), mappings, seed=seed + k,
                             min_utilization=min_utilization)
        if len(ms) < mappings:
            notes.append(f"{level} {size:g} B: only {len(ms)} valid distinct mappings in "
                         f"{ms.candidates:,} drawn (asked for {mappings})")
        if (size + extra) / einsum.word_bytes < f.buffer[0]:
            notes.append(f"{level} {size:g} B" + (f" (+ {extra:g} B above it)" if extra else "")
                         + f" is below the smallest two-level tile ({int(f.buffer[0])} words): "
                           f"its bound is taken at that tile")
        frames.append(_frame(ms, f, level, size, extra))
        if search_rounds and len(ms):
            smaller = [s for s in found if s <= size]
            best = local_search(ms, seed=seed + k, rounds=search_rounds,
                                min_utilization=min_utilization,
                                start=found[max(smaller)] if smaller else None)
            found[size] = best
            searched.append(_frame(best, f, level, size, extra))
    points = pd.concat(frames, ignore_index=True)
    if not len(points):
        raise arch.error(
            f"no valid mapping found at any {level} size"
            + (f"; none keeps {min_utilization:.0%} of the {arch.macs} MACs busy (lower "
               f"--min-utilization)" if min_utilization > 0 else
               "; the buffers may leave too little room (try larger sizes or more --mappings)"))
    return AccelSweep(einsum, arch, level, f, points, mappings, notes,
                      pd.concat(searched, ignore_index=True) if searched else None, above)


def levels_above(einsum: Einsum, arch: Arch, level: str) -> dict[str, float]:
    """The on-chip memory levels between ``level`` and DRAM (before it in nest order) that
    keep a tensor of ``einsum`` -> their bytes: data they hold is reused without DRAM, so
    the capacity the bound applies to includes them."""
    index = next(i for i, lv in enumerate(arch.levels) if lv.name == level)
    tensors = {t.name for t in einsum.tensors}
    return {lv.name: float(lv.size_bytes) for lv in arch.levels[1:index]
            if lv.kind == "memory" and lv.size_bytes is not None and tensors & set(lv.keeps)}


def least_bytes(arch: Arch, level: Level) -> float:
    """Bytes memory ``level`` needs at the least: one word of each tensor it keeps (every
    loop at DRAM makes every tile one element, which every fan-out allows)."""
    return sum(level.bits.get(t, arch.word_bits) for t in level.keeps) / 8


def _check_fits(einsum: Einsum, arch: Arch, level: str,
                sizes_bytes: tuple[float, ...] | list[float]) -> float:
    """The bytes the swept ``level`` needs at the least; an architecture on which no mapping
    can fit (a fixed level too small, or every swept size) is an error naming the level."""
    def what(lv: Level) -> str:
        return ", ".join(f"{lv.bits.get(t, arch.word_bits)}-bit {t}" for t in lv.keeps)

    swept = arch.level(level)
    for i, lv in enumerate(arch.levels):
        if i and lv.kind == "memory" and lv.name != level and \
                lv.size_bytes < least_bytes(arch, lv):
            raise arch.error(
                f"no mapping fits: level {lv.name!r} holds {lv.size_bytes:g} B, but the "
                f"smallest mapping needs {least_bytes(arch, lv):g} B there (one word each of "
                f"{what(lv)})", key=f"levels.{i}.size_bytes", value=lv.size_bytes)
    need = least_bytes(arch, swept) if swept.kind == "memory" else 0.0
    if sizes_bytes and max(sizes_bytes) < need:
        raise arch.error(
            f"no mapping fits: every {level} size (largest "
            f"{max(sizes_bytes):g} B) is below the {need:g} B the smallest mapping needs there "
            f"(one word each of {what(swept)})")
    return need


def _frame(ms: MappingSet, f: Frontier, level: str, size: float, above: float = 0.0
           ) -> pd.DataFrame:
    """The mappings of one ``size`` of ``level``, their bound taken at ``size + above``
    bytes (``above``: the on-chip levels between ``level`` and DRAM)."""
    nest, wb = ms.nest, ms.nest.einsum.word_bytes
    below_dram = [s for s, slot in enumerate(nest.slots) if slot.level > 0]
    uniform = tile_of(ms.factors, below_dram)
    tile_words = sum(footprint(t, nest.ranks, uniform) for t in nest.einsum.tensors)
    total = ms.total
    cap_bound = f.lookup((size + above) / wb)
    if cap_bound is None:  # smaller than any two-level tile: use the smallest tile's bound
        cap_bound = int(f.accesses[0])
    at_tile = f.lookup_many(tile_words)
    level_index = next(i for i, lv in enumerate(nest.arch.levels) if lv.name == level)
    df = pd.DataFrame({
        "capacity_bytes": size, "bound_capacity_bytes": size + above,
        "mapping_id": np.arange(len(ms)),
        "dram_accesses": total, "dram_bytes": total * wb,
        **{f"{t}_accesses": a for t, a in ms.accesses.items()},
        "level_used_bytes": level_bytes(nest, level_index, ms.factors),
        "tile_words": tile_words, "dram_tile_words": ms.dram_footprint(),
        "bound_at_capacity": cap_bound, "bound_at_tile": at_tile,
        "macs_used": ms.macs_used, "utilization": utilization(ms),
        "compute_cycles": compute_cycles(ms), "candidates": ms.candidates,
        "mapping": [ms.describe(i) for i in range(len(ms))]})
    df["below_bound_at_capacity"] = df["dram_accesses"] < df["bound_at_capacity"]
    df["below_bound_at_tile"] = df["dram_accesses"] < df["bound_at_tile"]
    df.insert(0, "problem", nest.einsum.name)
    return df
