"""The reshard transfer plan of the generic reshard program factory (tt-metal, late 2024).

Pages are tiles of a (Ht × Wt)-tile tensor, numbered row-major. A shard is a rectangle of
tiles held by one core, its pages in row-major order inside the shard. Only output cores run
kernels: each walks its pages in order and *pulls* them from input cores; consecutive pages
that are consecutive in the same input core's shard form one stride (one NoC read).
Strides are compressed into ranges, and the first ceil(R/2) ranges go to NCRISC (NoC 0),
the rest to BRISC (NoC 1).

``page_plan`` builds the plan page by page (exact, for small cases and tests);
``core_plan`` computes the same per-core counts from interval arithmetic (fast).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MAX_STRIDES_PER_RANGE = 255  # 8-bit num_strides in the runtime args


@dataclass(frozen=True)
class Shard:
    core: tuple[int, int]  # (x, y) in the grid
    r0: int
    r1: int
    c0: int
    c1: int

    @property
    def width(self) -> int:
        return self.c1 - self.c0


def shards(ht: int, wt: int, grid: tuple[int, int], strategy: str) -> list[Shard]:
    """Shards in ROW_MAJOR core order (row of cores by row of cores)."""
    x, y = grid
    n = x * y
    out = []
    for k in range(n):
        cx, cy = k % x, k // x
        if strategy == "BLOCK":
            sh, sw = ht // y, wt // x
            out.append(Shard((cx, cy), cy * sh, (cy + 1) * sh, cx * sw, (cx + 1) * sw))
        elif strategy == "HEIGHT":
            sh = ht // n
            out.append(Shard((cx, cy), k * sh, (k + 1) * sh, 0, wt))
        elif strategy == "WIDTH":
            sw = wt // n
            out.append(Shard((cx, cy), 0, ht, k * sw, (k + 1) * sw))
        else:
            raise ValueError(f"unknown shard strategy {strategy!r}")
    return out


@dataclass
class Stride:
    src: tuple[int, int]  # input core
    start: int            # first local page in the input core's shard
    pages: int


def page_plan(ht: int, wt: int, gin: tuple[int, int], sin: str, gout: tuple[int, int],
              sout: str) -> dict[tuple[int, int], list[Stride]]:
    """For every output core, its strides in walk order (exact, page by page)."""
    ins = shards(ht, wt, gin, sin)
    owner: dict[tuple[int, int], tuple[Shard, int]] = {}
    for s in ins:
        for r in range(s.r0, s.r1):
            for c in range(s.c0, s.c1):
                owner[(r, c)] = (s, (r - s.r0) * s.width + (c - s.c0))
    plan = {}
    for o in shards(ht, wt, gout, sout):
        strides: list[Stride] = []
        for r in range(o.r0, o.r1):
            for c in range(o.c0, o.c1):
                s, local = owner[(r, c)]
                last = strides[-1] if strides else None
                if last and last.src == s.core and last.start + last.pages == local:
                    last.pages += 1
                else:
                    strides.append(Stride(s.core, local, 1))
        plan[o.core] = strides
    return plan


@dataclass
class CorePlan:
    """Per output core: strides (NoC reads) and bytes for each RISC, and input cores read."""

    core: tuple[int, int]
    strides: tuple[int, int]  # (NCRISC, BRISC)
    pages: tuple[int, int]
    ranges: int
    # one per input core read: (its x, its y, pages, reads, share of the ranges on NCRISC)
    flows: list[tuple[int, int, int, int, float]] = field(default_factory=list)

    @property
    def sources(self) -> dict[tuple[int, int], int]:
        """Input core -> pages read from it."""
        return {(x, y): pages for x, y, pages, _, _ in self.flows}


def _overlaps(lo: int, hi: int, size: int, blocks: int) -> list[tuple[int, int, int]]:
    """Blocks of ``size`` (``blocks`` of them) overlapping [lo, hi): (index, start, end)."""
    out = []
    for b in range(lo // size, min(blocks, math.ceil(hi / size))):
        s, e = max(lo, b * size), min(hi, (b + 1) * size)
        if e > s:
            out.append((b, s, e))
    return out


def core_plan(ht: int, wt: int, gin: tuple[int, int], sin: str, gout: tuple[int, int],
              sout: str) -> list[CorePlan]:
    """The plan's per-core counts from interval arithmetic (no page walk)."""
    xin, yin = gin
    nin = xin * yin
    if sin == "BLOCK":
        row_size, rows_n, col_size, cols_n = ht // yin, yin, wt // xin, xin
    elif sin == "HEIGHT":
        row_size, rows_n, col_size, cols_n = ht // nin, nin, wt, 1
    else:
        row_size, rows_n, col_size, cols_n = ht, 1, wt // nin, nin

    def src_core(rb: int, cb: int) -> tuple[int, int]:
        k = rb * cols_n + cb if sin == "BLOCK" else (rb if sin == "HEIGHT" else cb)
        return (k % xin, k // xin)

    out = []
    for o in shards(ht, wt, gout, sout):
        cols = _overlaps(o.c0, o.c1, col_size, cols_n)
        rows = _overlaps(o.r0, o.r1, row_size, rows_n)
        k = len(cols)
        full_width = k == 1 and cols[0][2] - cols[0][1] == col_size
        n_rows = o.r1 - o.r0
        if full_width:  # whole input-shard rows: one contiguous read per row block
            group_strides = [1 for _ in rows]
            group_ranges = [1 for _ in rows]
        elif k == 1:  # one read per row, same core and a constant jump: one range per block
            group_strides = [re_ - rs_ for _, rs_, re_ in rows]
            group_ranges = [math.ceil((re_ - rs_) / MAX_STRIDES_PER_RANGE) for _, rs_, re_ in rows]
        else:  # k reads per row; full-width middle pieces of a row merge into one range
            first_partial = cols[0][2] - cols[0][1] < col_size
            last_partial = cols[-1][2] - cols[-1][1] < col_size
            per_row = 1 + int(first_partial) + int(last_partial) if k > 2 else \
                1 + int(first_partial or last_partial)
            group_strides = [(re_ - rs_) * k for _, rs_, re_ in rows]
            group_ranges = [(re_ - rs_) * min(per_row, k) for _, rs_, re_ in rows]
        ranges = sum(group_ranges)
        first_half = math.ceil(ranges / 2)
        # ranges are in walk order; assign strides and pages to the RISC that owns each range
        s0 = p0 = taken = 0
        pages_per_row = o.c1 - o.c0
        flows = []
        for (rb, rs_, re_), gs, gr in zip(rows, group_strides, group_ranges, strict=True):
            share = min(max(first_half - taken, 0), gr) / gr
            s0 += gs * share
            p0 += (re_ - rs_) * pages_per_row * share
            taken += gr
            reads = 1 if full_width else re_ - rs_  # per input core of this row block
            flows += [(*src_core(rb, cb), (re_ - rs_) * (ce - cs), reads, share)
                      for cb, cs, ce in cols]
        total_pages = n_rows * pages_per_row
        total_strides = sum(group_strides)
        out.append(CorePlan(o.core, (round(s0), total_strides - round(s0)),
                            (round(p0), total_pages - round(p0)), ranges, flows))
    return out
