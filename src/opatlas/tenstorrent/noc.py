"""Wormhole B0 NoC topology: where each logical worker core sits, and the links a transfer uses.

Facts (tt-metal / UMD ``wormhole_b0_80_arch.yaml``): the NoC is a 10 × 12 grid of routers
(x = columns, y = rows), folded into a torus in both dimensions. Worker (Tensix) cores sit at
physical columns 1–4 and 6–9 and rows 1–5 and 7–11 (column 5 and row 6 hold DRAM, ARC and
PCIe; rows 0 and 6 hold Ethernet). The logical grid (x, y) of ``ttnn.CoreGrid`` maps onto those
in order (an unharvested chip: n150 cards harvest rows, which shifts rows below a harvested
one by one, not modelled). Each of the two NoCs is unidirectional and dimension-ordered:
NoC 0 goes east then south (+x first, then +y), NoC 1 north then west (-y first, then -x).

A read's data travels from the source core to the reader on the reader's NoC. ``ROUTES``
holds, for each NoC and each (source, destination) pair of logical cores, the link ids the
data crosses (padded with ``NO_LINK``), so per-link load is one ``np.bincount``.
"""

from __future__ import annotations

import numpy as np

NOC_X, NOC_Y = 10, 12
WORKER_X = (1, 2, 3, 4, 6, 7, 8, 9)
WORKER_Y = (1, 2, 3, 4, 5, 7, 8, 9, 10, 11)
GRID = 8  # logical grid side the reshard sweep uses (CoreGrid x, y in 1..8)
LINKS_PER_NOC = NOC_X * NOC_Y * 2  # each router: one outgoing x link, one outgoing y link
NO_LINK = 2 * LINKS_PER_NOC
MAX_HOPS = (NOC_X - 1) + (NOC_Y - 1)


def core_id(x: int | np.ndarray, y: int | np.ndarray) -> int | np.ndarray:
    """Logical (x, y) -> index in 0..63 (row-major over an 8 × 8 grid)."""
    return y * GRID + x


def _link(noc: int, px: int, py: int, axis: int) -> int:
    return noc * LINKS_PER_NOC + (py * NOC_X + px) * 2 + axis


def route(noc: int, src: tuple[int, int], dst: tuple[int, int]) -> list[int]:
    """Link ids from logical core ``src`` to logical core ``dst`` on ``noc``."""
    sx, sy = WORKER_X[src[0]], WORKER_Y[src[1]]
    dx, dy = WORKER_X[dst[0]], WORKER_Y[dst[1]]
    if noc == 0:  # +x along the source's row, then +y down the destination's column
        xs = [_link(0, (sx + i) % NOC_X, sy, 0) for i in range((dx - sx) % NOC_X)]
        ys = [_link(0, dx, (sy + j) % NOC_Y, 1) for j in range((dy - sy) % NOC_Y)]
        return xs + ys
    # -y up the source's column, then -x along the destination's row
    ys = [_link(1, sx, (sy - j) % NOC_Y, 1) for j in range((sy - dy) % NOC_Y)]
    xs = [_link(1, (sx - i) % NOC_X, dy, 0) for i in range((sx - dx) % NOC_X)]
    return ys + xs


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """``route`` for every NoC and (source, destination) pair at once (numpy, no loops)."""
    n = GRID * GRID
    ids = np.arange(n)
    px, py = np.array(WORKER_X)[ids % GRID], np.array(WORKER_Y)[ids // GRID]
    sx, sy, dx, dy = px[:, None], py[:, None], px[None, :], py[None, :]
    i = np.arange(MAX_HOPS)[:, None, None]
    routes = np.full((2, MAX_HOPS, n, n), NO_LINK, dtype=np.int64)
    hops = np.zeros((2, n, n), dtype=np.int16)
    for noc in (0, 1):
        if noc == 0:  # x first (+x on the source's row), then +y on the destination's column
            first, second = (dx - sx) % NOC_X, (dy - sy) % NOC_Y
            a = _link(0, 0, 0, 0) + ((sy * NOC_X + (sx + i) % NOC_X) * 2)
            b = _link(0, 0, 0, 1) + (((sy + i - first) % NOC_Y) * NOC_X + dx) * 2
        else:  # y first (-y on the source's column), then -x on the destination's row
            first, second = (sy - dy) % NOC_Y, (sx - dx) % NOC_X
            a = _link(1, 0, 0, 1) + (((sy - i) % NOC_Y) * NOC_X + sx) * 2
            b = _link(1, 0, 0, 0) + (dy * NOC_X + (sx - (i - first)) % NOC_X) * 2
        routes[noc] = np.where(i < first, a, np.where(i < first + second, b, NO_LINK))
        hops[noc] = first + second
    return routes.transpose(0, 2, 3, 1).astype(np.int16), hops


ROUTES, HOPS = _tables()


def link_loads(noc: np.ndarray, src: np.ndarray, dst: np.ndarray, *amounts: np.ndarray
               ) -> list[np.ndarray]:
    """For each per-flow amount (bytes, requests, ...), its total on every link (length
    ``2 * LINKS_PER_NOC``): what the flows that cross the link carry."""
    ids = ROUTES[noc, src, dst].ravel()  # flows × MAX_HOPS
    return [np.bincount(ids, weights=np.repeat(a, MAX_HOPS), minlength=NO_LINK + 1)[:NO_LINK]
            for a in amounts]
