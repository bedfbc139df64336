"""Wormhole B0 reshard simulator: time = launch + max(destination, source) + contention.

Destination bound: for each output core, each of its two data-movement RISCs issues its
strides on its own NoC, ``tx_ns`` per read (issue and round-trip overhead) plus bytes over the
NoC bandwidth; the core is done when both RISCs are; the op when the slowest core is.
Source bound: an input core serves all the reads of its shard through its two NoC ports.
Contention: every byte occupies one NoC link per hop between its source and destination core,
and reads of different cores share links; the delay added is byte-hops over the mesh's
effective link throughput (``hop_bytes_per_cycle``, calibrated). Without it, many-core reshards
would run at (cores × link bandwidth), several times faster than the hardware does.

Hardware facts and free parameters, in one place (``WormholeParams``), each with its source.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from opatlas.tenstorrent.plan import core_plan, traffic
from opatlas.tenstorrent.reshard import DATUM_SIZE, TILE


@dataclass(frozen=True)
class WormholeParams:
    # facts
    aiclk_ghz: float = 1.0          # Wormhole n150 AICLK 1 GHz (tt-metal soc descriptor)
    tile_bytes: int = 2048          # bf16 32x32 tile: TileSize(Float16_b)
    l1_bytes: int = 1464 * 1024     # MEM_L1_SIZE, wormhole dev_mem_map.h
    # free parameters (calibrated by `opatlas calibrate`; defaults are first-principles guesses)
    noc_bytes_per_cycle: float = 30.0  # NoC link ≈ 28–32 B/cycle per NoC (spec A.6)
    tx_ns: float = 100.0            # per noc_async_read issue + latency share
    launch_ns: float = 2000.0       # program launch and kernel start/stop
    hop_bytes_per_cycle: float = 700.0  # byte-hops per cycle the shared mesh links sustain

    @property
    def noc_bw(self) -> float:
        """Bytes per ns of one NoC."""
        return self.noc_bytes_per_cycle * self.aiclk_ghz

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> WormholeParams:
        return cls(**json.loads(Path(path).read_text()))

    def with_free(self, tx_ns: float, bw: float, launch_ns: float, hop: float
                  ) -> WormholeParams:
        return replace(self, tx_ns=tx_ns, noc_bytes_per_cycle=bw, launch_ns=launch_ns,
                       hop_bytes_per_cycle=hop)


@dataclass
class SimResult:
    time_ns: float
    dest_ns: float
    src_ns: float
    contention_ns: float
    tiles: int
    max_strides: int
    max_pages: int
    fan_in: int
    fan_out: int
    risc_imbalance: float

    def features(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if k != "time_ns"}


def simulate(ht: int, wt: int, gin: tuple[int, int], sin: str, gout: tuple[int, int], sout: str,
             p: WormholeParams | None = None, dtype: str = "bfloat16") -> SimResult:
    p = p or WormholeParams()
    page = TILE * TILE * DATUM_SIZE[dtype]
    plan = core_plan(ht, wt, gin, sin, gout, sout)
    dest = 0.0
    max_strides = max_pages = fan_in = 0
    imbalance = 0.0
    for c in plan:
        t = [p.tx_ns * c.strides[k] + c.pages[k] * page / p.noc_bw for k in (0, 1)]
        dest = max(dest, *t)
        max_strides = max(max_strides, sum(c.strides))
        max_pages = max(max_pages, sum(c.pages))
        fan_in = max(fan_in, len(c.sources))
        if sum(t):
            imbalance = max(imbalance, abs(t[0] - t[1]) / (t[0] + t[1]))
    tr = traffic(plan)
    src = max(tr.per_source.values()) * page / (2 * p.noc_bw)
    contention = tr.page_hops * page / (p.hop_bytes_per_cycle * p.aiclk_ghz)
    return SimResult(p.launch_ns + max(dest, src) + contention, dest, src, contention, ht * wt,
                     max_strides, max_pages, fan_in, max(tr.fan_out.values()), imbalance)
