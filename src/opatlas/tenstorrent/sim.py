"""Wormhole B0 reshard simulator: the kernel's transfer plan played on the NoC's resources.

Only output cores run kernels; each of their two data-movement RISCs pulls its share of the
strides from the input cores (``plan.core_plan``), one ``noc_async_read`` per stride, split into
NoC requests of at most 8 KiB. Every byte then occupies, for ``bytes / bandwidth``:
  * the reading RISC: a fixed cost per read issued (``tx_ns``) and, per request, a share of its
    round trip (``req_ns`` plus ``hop_ns`` per router hop): the latency-bound pipeline of a
    RISC with a bounded number of reads in flight, which is what many small reads from far away
    pay; the bytes arriving through the core's NoC port (``port_bytes_per_cycle``): incast;
  * the source core's NoC port, which serves every reader of its shard;
  * every link on the dimension-ordered route from source to reader (``noc.py``), shared by all
    flows that cross it (``link_bytes_per_cycle``).
  * the mesh as a whole: all byte-hops and request-hops over what it sustains when many routes
    cross (``mesh_byte_hops_per_cycle``, ``mesh_req_hop_ns``); all-to-all reshards on large
    grids run several times slower than their busiest link alone allows.
The op takes ``launch_ns`` plus a smooth maximum (a p-norm, ``overlap_p``) of the slowest RISC,
the busiest source port, the busiest link and the mesh: the busiest resource sets the pace,
and the others add the part of their work that does not overlap with it.

Each input core's bytes reach a reader over both NoCs in equal parts. The kernel splits its
ranges in walk order between NCRISC (NoC 0) and BRISC (NoC 1); taken literally, a one-range
plan puts everything on NoC 0, but the measurements contradict that: one input core serves 2
KiB tiles to many readers at 36 ns (56 B/ns, more than one NoC port), and a row of cores
feeding a column (3x1→1x3, 4x1→1x4) would need 63 B/cycle on one NoC 0 link. With an even
split both run at the NoC's 32 B/cycle link rate (see RESULTS.md).

Everything is vectorised over a plan's flows (numpy), and the calibration fits the free
parameters of ``WormholeParams`` against hardware measurements (``calibrate.py``).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from opatlas.tenstorrent import noc
from opatlas.tenstorrent.plan import CorePlan, core_plan
from opatlas.tenstorrent.reshard import TILE_BYTES, fits_l1

FREE = ("port_bytes_per_cycle", "link_bytes_per_cycle", "tx_ns", "req_ns", "hop_ns",
        "link_req_ns", "mesh_byte_hops_per_cycle", "mesh_req_hop_ns", "launch_ns", "overlap_p")

# what each free parameter means physically, and its unit (for `opatlas calibrate --report`)
MEANING = {
    "port_bytes_per_cycle": ("a core's NoC port (NIU), per NoC: source serving, reader incast",
                             "B/cycle"),
    "link_bytes_per_cycle": ("one router-to-router NoC link, per NoC", "B/cycle"),
    "tx_ns": ("RISC time to issue one noc_async_read (per stride)", "ns/read"),
    "req_ns": ("latency-bound pipeline: round trip / reads in flight, per NoC request",
               "ns/request"),
    "hop_ns": ("latency-bound pipeline: extra round trip / reads in flight, per request and hop",
               "ns/(request·hop)"),
    "link_req_ns": ("per NoC packet crossing a shared link: arbitration where flows merge",
                    "ns/packet"),
    "mesh_byte_hops_per_cycle": ("what the whole mesh sustains when many flows cross it",
                                 "B·hop/cycle"),
    "mesh_req_hop_ns": ("mesh-wide cost per request and hop (small packets, many routes)",
                        "ns/(request·hop)"),
    "launch_ns": ("program launch and kernel start/stop", "ns"),
    "overlap_p": ("p-norm joining RISC, source-port, link and mesh times (1: add, ∞: max)",
                  "-"),
}


# the key of a parameters file under which `opatlas calibrate` says what it found of the fit
# (parameters at a bound of its search): not a parameter
NOTES = "calibration_notes"


@dataclass(frozen=True)
class WormholeParams:
    # facts
    aiclk_ghz: float = 1.0          # Wormhole n150 AICLK 1 GHz (tt-metal soc descriptor)
    tile_bytes: int = 2048          # bf16 32x32 tile: TileSize(Float16_b)
    l1_bytes: int = 1464 * 1024     # MEM_L1_SIZE, wormhole dev_mem_map.h
    burst_bytes: int = 8192         # largest NoC packet: 256 data flits of 32 B (tt-isa-docs)
    # free parameters (calibrated by `opatlas calibrate`; defaults are first-principles guesses)
    port_bytes_per_cycle: float = 28.0  # a core's NIU, per NoC: ≈ 28 B/cycle (spec A.6)
    link_bytes_per_cycle: float = 32.0  # a router-to-router link, per NoC: 32 B flits per cycle
    tx_ns: float = 20.0             # RISC time to issue one noc_async_read
    req_ns: float = 10.0            # per NoC request: round trip / reads in flight
    hop_ns: float = 0.5             # per request and router hop: extra round trip / in flight
    link_req_ns: float = 5.0        # per NoC packet crossing a link: arbitration where flows merge
    mesh_byte_hops_per_cycle: float = 700.0  # mesh-wide throughput of byte-hops
    mesh_req_hop_ns: float = 0.1    # mesh-wide cost per request·hop
    launch_ns: float = 600.0        # program launch and kernel start/stop
    overlap_p: float = 4.0          # p of the p-norm joining RISC, source port and link times

    @property
    def port_bw(self) -> float:
        """Bytes per ns through one core's NoC port."""
        return self.port_bytes_per_cycle * self.aiclk_ghz

    @property
    def link_bw(self) -> float:
        """Bytes per ns over one NoC link."""
        return self.link_bytes_per_cycle * self.aiclk_ghz

    def save(self, path: str | Path, option: str = "--out",
             notes: dict[str, Any] | None = None) -> None:
        """The parameters by name, plus ``notes`` (what the calibration says of them) under
        ``NOTES``, which ``load`` reads past."""
        from opatlas.atomic import write_output

        text = json.dumps({**asdict(self), **({NOTES: notes} if notes else {})}, indent=1)
        write_output(path, lambda tmp: tmp.write_text(text), option)

    @classmethod
    def load(cls, path: str | Path, source: str | None = None) -> WormholeParams:
        """Parameters saved by ``opatlas calibrate --out``: each a finite number > 0; one
        the file lacks keeps its first-principles default, and that is said. ``source`` is
        how the user named the file (``OPATLAS_WORMHOLE_PARAMS=FILE``, ``--params FILE``):
        what is said names it so, not the bare path."""
        from opatlas.errors import OpatlasError

        name = source or str(path)
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise OpatlasError(f"{name}: not a parameters file ({exc})") from None
        if not isinstance(raw, dict):
            raise OpatlasError(f"{name}: holds a {type(raw).__name__}, not the parameters by "
                               f"name (opatlas calibrate --out writes them)")
        known = {f.name for f in fields(cls)}
        raw.pop(NOTES, None)
        unknown = sorted(set(raw) - known)
        if unknown:
            print(f"opatlas: {name}: ignoring parameters this simulator no longer has: "
                  f"{', '.join(unknown)} (refit with `opatlas calibrate`)", file=sys.stderr)
        for k in sorted(known & set(raw)):
            v = raw[k]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                    or v <= 0:
                raise OpatlasError(f"{name}: {k} is {v!r}: not a finite number > 0")
        missing = [k for k in FREE if k not in raw]
        if missing:
            print(f"opatlas: {name}: no {', '.join(missing)}: their first-principles defaults "
                  f"are used, not calibrated values (opatlas calibrate --out writes them all)",
                  file=sys.stderr)
        return cls(**{k: v for k, v in raw.items() if k in known})

    def fingerprint(self) -> str:
        """8 hex digits that tell these parameters from others: every value as a float, so
        a file writing ``500`` and one writing ``500.0`` are the same parameters."""
        import hashlib

        text = json.dumps({k: float(v) for k, v in asdict(self).items()}, sort_keys=True)
        return hashlib.sha224(text.encode()).hexdigest()[:8]

    def free(self) -> np.ndarray:
        return np.array([getattr(self, k) for k in FREE], dtype=float)

    def with_free(self, values: np.ndarray) -> WormholeParams:
        return replace(self, **{k: float(v) for k, v in zip(FREE, values, strict=True)})


@dataclass
class Flows:
    """One row per (output core, input core) pair of a plan; cores as ``noc.core_id``."""

    dst: np.ndarray
    src: np.ndarray
    pages: np.ndarray
    reads: np.ndarray


def flows(plan: list[CorePlan]) -> Flows:
    a = np.array([f for c in plan for f in c.flows], dtype=float).reshape(-1, 5)
    dst = np.repeat([noc.core_id(*c.core) for c in plan], [len(c.flows) for c in plan])
    return Flows(dst, noc.core_id(a[:, 0], a[:, 1]).astype(np.int64), a[:, 2], a[:, 3])


RISCS = 2 * noc.GRID * noc.GRID  # (core, NoC) slots


@dataclass
class Loads:
    """What a plan asks of each resource, before any parameter: per reading RISC (indexed
    ``core * 2 + noc``) reads, NoC requests, request·hops and bytes; the busiest source port
    and link in bytes."""

    reads: np.ndarray
    requests: np.ndarray
    request_hops: np.ndarray
    bytes: np.ndarray
    src_port_bytes: float
    link_bytes: np.ndarray     # per link that could be the busiest: its bytes and requests
    link_requests: np.ndarray
    byte_hops: float           # Σ bytes × hops over every flow and NoC
    request_hop_total: float   # Σ requests × hops
    fan_in: int
    fan_out: int


def loads(f: Flows, page_bytes: int, burst_bytes: int = 8192) -> Loads:
    n = len(f.dst)
    nbytes = f.pages * page_bytes
    requests = f.reads * np.ceil(nbytes / np.maximum(f.reads, 1) / burst_bytes)
    # each NoC carries half of every flow: rows [0, n) on NoC 0, [n, 2n) on NoC 1
    both = np.repeat(np.array([0, 1]), n)
    dst, src = np.concatenate((f.dst, f.dst)), np.concatenate((f.src, f.src))
    half = np.concatenate((nbytes, nbytes, requests, requests, f.reads, f.reads)) / 2
    byts, req, reads = half[: 2 * n], half[2 * n: 4 * n], half[4 * n:]
    risc = dst * 2 + both
    hops = noc.HOPS[both, src, dst]
    lb, lr = noc.link_loads(both, src, dst, byts, req)
    busy = (lb >= lb.max()) | (lr >= lr.max())  # only these can be the busiest link
    return Loads(np.bincount(risc, reads, RISCS), np.bincount(risc, req, RISCS),
                 np.bincount(risc, req * hops, RISCS), np.bincount(risc, byts, RISCS),
                 float(np.bincount(src * 2 + both, byts, RISCS).max()), lb[busy], lr[busy],
                 float(byts @ hops), float(req @ hops),
                 int(np.bincount(f.dst).max()), int(np.bincount(f.src).max()))


def risc_ns(p: WormholeParams, reads: Any, requests: Any, request_hops: Any, nbytes: Any) -> Any:
    """A reading RISC's time: issue, latency-bound pipeline and incast through its port."""
    return (p.tx_ns * reads + p.req_ns * requests + p.hop_ns * request_hops
            + nbytes / p.port_bw)


def link_ns(p: WormholeParams, nbytes: Any, requests: Any) -> Any:
    """A link's time: its bytes, and a per-packet arbitration cost where flows merge."""
    return nbytes / p.link_bw + p.link_req_ns * requests


def mesh_ns(p: WormholeParams, byte_hops: Any, request_hops: Any) -> Any:
    """The whole mesh's time: all traffic's byte-hops and request-hops over what it sustains
    (many crossing routes with dimension-ordered, cut-through switching)."""
    return byte_hops / (p.mesh_byte_hops_per_cycle * p.aiclk_ghz) + p.mesh_req_hop_ns * request_hops


def combine(p: WormholeParams, *terms: Any) -> Any:
    """``launch + (Σ term^p)^(1/p)``: the busiest resource, plus what others do not overlap."""
    scale = np.maximum.reduce([np.asarray(t, dtype=float) for t in terms])
    scale = np.where(scale > 0, scale, 1.0)
    s = sum((np.asarray(t, dtype=float) / scale) ** p.overlap_p for t in terms)
    return p.launch_ns + scale * s ** (1 / p.overlap_p)


@dataclass
class SimResult:
    time_ns: float
    risc_ns: float        # slowest reading RISC (issue + latency-bound pipeline + incast)
    src_ns: float         # busiest source core's NoC port
    link_ns: float        # busiest NoC link
    mesh_ns: float        # the whole mesh
    tiles: int
    max_strides: int      # most reads one output core issues
    max_pages: int
    fan_in: int           # most input cores one output core reads from (gather degree)
    fan_out: int          # most output cores one input core feeds
    max_hops: float       # longest mean route (hops per request) of a RISC

    def features(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if k != "time_ns"}


def simulate(ht: int, wt: int, gin: tuple[int, int], sin: str, gout: tuple[int, int], sout: str,
             p: WormholeParams | None = None, dtype: str = "bfloat16") -> SimResult:
    """Simulated kernel time of one reshard (``ht`` × ``wt`` tiles, grids as (x, y)), as if
    the kernel ran: an identical memory config runs none (:func:`identical`); one page is a
    tile of the data format (``TILE_BYTES``: a bfloat8_b tile is 1088 bytes)."""
    p = p or WormholeParams()
    page = TILE_BYTES[dtype]
    plan = core_plan(ht, wt, gin, sin, gout, sout)
    ld = loads(flows(plan), page, p.burst_bytes)
    per_risc = risc_ns(p, ld.reads, ld.requests, ld.request_hops, ld.bytes)
    k = int(np.argmax(per_risc))
    r, s = float(per_risc[k]), ld.src_port_bytes / p.port_bw
    lk = float(np.max(link_ns(p, ld.link_bytes, ld.link_requests), initial=0.0))
    m = float(mesh_ns(p, ld.byte_hops, ld.request_hop_total))
    hops = ld.request_hops / np.maximum(ld.requests, 1e-9)
    return SimResult(float(combine(p, r, s, lk, m)), r, s, lk, m, ht * wt,
                     max(sum(c.strides) for c in plan), max(sum(c.pages) for c in plan),
                     ld.fan_in, ld.fan_out, float(hops.max()))


@lru_cache(maxsize=1)
def calibrated_params() -> WormholeParams:
    """The parameters `opatlas calibrate` fitted on the bundled Wormhole measurements."""
    from importlib import resources

    f = resources.files("opatlas") / "data" / "tt-wormhole" / "wormhole_params.json"
    if not f.is_file():
        print("opatlas: no calibrated Wormhole parameters bundled; using first-principles "
              "defaults", file=sys.stderr)
        return WormholeParams()
    return WormholeParams.load(str(f))


def identical(gin: tuple[int, int], sin: str, gout: tuple[int, int], sout: str,
              in_orientation: str = "ROW_MAJOR", out_orientation: str = "ROW_MAJOR") -> bool:
    """Whether the two memory configs are the same (grid, strategy and orientation; the shard
    shape follows from them): ttnn's ``to_memory_config`` then returns the tensor unchanged,
    runs no kernel and takes 0 ns. The seed's sweep never measures such a pair."""
    return (tuple(gin), sin, in_orientation) == (tuple(gout), sout, out_orientation)


def check_l1(ht: int, wt: int, grid: tuple[int, int], side: str, p: WormholeParams,
             dtype: str = "bfloat16") -> None:
    """InvalidShape unless an even shard of ``ht`` × ``wt`` tiles on ``grid`` fits in a core's
    L1 (``p.l1_bytes``): the sweep's "Will not fit in L1" rule (``reshard.fits_l1``) with the
    chip's L1 and the data format's tile size; ``side`` names the grid in the message."""
    from opatlas.console import counted
    from opatlas.errors import InvalidShape

    tile, cores = TILE_BYTES[dtype], grid[0] * grid[1]
    if not fits_l1(ht, wt, grid[0], grid[1], budget=p.l1_bytes, tile_bytes=tile):
        raise InvalidShape(f"{side}: {ht}x{wt} tiles of {tile} B over {counted(cores, 'core')} "
                           f"put {tile * ht * wt // cores} bytes on each core, and a core's L1 holds "
                           f"{p.l1_bytes} bytes (l1_bytes): will not fit in L1")


def reshard_time_ns(input_shape: tuple[int, ...] | list[int], in_grid: str | tuple[int, int],
                    in_strategy: str, out_grid: str | tuple[int, int], out_strategy: str,
                    dtype: str = "bfloat16", params: WormholeParams | None = None) -> float:
    """Predicted device kernel time (ns) of an L1-sharded reshard on Wormhole B0.

    ``input_shape``: the tensor's shape in elements; as ttnn shards it, every dim but the last
    folds into the height (``[6, 1, 1024, 2048]`` is ``[1, 1, 6144, 2048]``), tiled 32 × 32;
    grids as ``"XxY"`` or ``(x, y)`` (x columns, y rows); strategies ``BLOCK``, ``WIDTH`` or
    ``HEIGHT`` (``ShardStrategy.`` prefixes and ``_SHARDED`` suffixes accepted); ``params``
    defaults to the calibrated ones. The same grid and strategy on both sides is 0 ns: ttnn
    returns the tensor unchanged (:func:`identical`). Raises ``InvalidShape`` if the shape is
    not positive whole tiles, does not shard evenly, or a shard does not fit in a core's L1."""
    from opatlas.errors import InvalidShape
    from opatlas.tenstorrent.reshard import is_tilable, parse_grid, shape_tiles

    gin = parse_grid(in_grid) if isinstance(in_grid, str) else tuple(in_grid)
    gout = parse_grid(out_grid) if isinstance(out_grid, str) else tuple(out_grid)
    sin, sout = _strategy(in_strategy), _strategy(out_strategy)
    if dtype not in TILE_BYTES:
        raise InvalidShape(f"reshard dtype {dtype!r} is not one of {sorted(TILE_BYTES)}")
    try:
        ht, wt = shape_tiles(input_shape)
    except ValueError as exc:
        raise InvalidShape(f"reshard {exc}") from None
    p = params or calibrated_params()
    for g, s, side in ((gin, sin, "input"), (gout, sout, "output")):
        if not (0 < g[0] <= noc.GRID and 0 < g[1] <= noc.GRID):
            raise InvalidShape(f"reshard {side} grid {g[0]}x{g[1]} is outside the 8x8 grid")
        if not is_tilable(ht, wt, g[0], g[1], s):
            raise InvalidShape(f"reshard {side}: {ht}x{wt} tiles cannot be {s}-sharded evenly "
                               f"on grid {g[0]}x{g[1]}")
        check_l1(ht, wt, g, f"reshard {list(input_shape)} {side} grid {g[0]}x{g[1]}", p, dtype)
    if identical(gin, sin, gout, sout):
        return 0.0
    return simulate(ht, wt, gin, sin, gout, sout, p, dtype).time_ns


def _strategy(s: str) -> str:
    name = str(s).split(".")[-1].upper().removesuffix("_SHARDED")
    if name not in ("BLOCK", "WIDTH", "HEIGHT"):
        from opatlas.errors import InvalidShape

        raise InvalidShape(f"unknown shard strategy {s!r} (BLOCK, WIDTH or HEIGHT)")
    return name
