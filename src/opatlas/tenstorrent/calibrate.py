"""Calibrate the simulator's free parameters (per-read cost, effective NoC bandwidth, launch)
against hardware measurements: per-group linear models ``t = coef·tiles + intercept`` fitted on
real Wormhole b0 cards (the seed's models CSV), evaluated at the tile counts the sweep has for
that group. Groups whose hardware fit is poor (coef ≤ 0, r² < 0.9, RMSRE > 0.25) are left out.
Grid pairs are split 80/20: the parameters are fitted on 80% and reported on the held-out 20%.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from opatlas.tenstorrent.plan import core_plan, traffic
from opatlas.tenstorrent.reshard import STRATEGIES, Suite, expand_suite, parse_grid
from opatlas.tenstorrent.sim import WormholeParams, simulate

PAGE = 2048
PER_GROUP = 8


def bundled_models() -> Path:
    return Path(str(resources.files("opatlas") / "data" / "tt-wormhole" /
                    "reshard_models_calibration.csv"))


def parse_group(group: str) -> tuple[str, str]:
    parts = group.split("-")
    return parts[0].split(".")[-1], parts[2].split(".")[-1]


def group_name(sin: str, sout: str) -> str:
    return (f"ShardStrategy.{sin}-ShardOrientation.ROW_MAJOR-"
            f"ShardStrategy.{sout}-ShardOrientation.ROW_MAJOR")


def held_out(in_grid: str, out_grid: str, frac: float = 0.2) -> bool:
    h = int(hashlib.sha224(f"{in_grid}-{out_grid}".encode()).hexdigest()[:8], 16)
    return h % 1000 < frac * 1000


@dataclass
class Sample:
    """Per vector: (strides, pages) of every output core's two RISCs, and max source pages."""

    group: int
    tiles: float
    target_ns: float
    strides: np.ndarray
    pages: np.ndarray
    src_pages: float
    page_hops: float = 0.0


def load_models(path: str | Path | None = None) -> pd.DataFrame:
    df = pd.read_csv(path or bundled_models())
    df["trusted"] = (df["coef"] > 0) & (df["r^2"] >= 0.9) & (df["RMSRE"] <= 0.25)
    return df


def group_vectors(models: pd.DataFrame, per_group: int = PER_GROUP, min_vectors: int = 1
                  ) -> Iterator[tuple[Any, pd.Series, str, str, Suite, np.ndarray]]:
    """For each trusted group of ``models``: (index, row, input strategy, output strategy,
    its suite, up to ``per_group`` of its vector indices spread evenly over the suite)."""
    suites: dict[tuple, Suite] = {}
    for idx, row in models[models["trusted"]].iterrows():
        gin, gout = parse_grid(row["in_grid"]), parse_grid(row["out_grid"])
        sin, sout = parse_group(row["group"])
        if (gin, gout) not in suites:
            suites[(gin, gout)] = expand_suite(gin, gout)
        suite = suites[(gin, gout)]
        ks = np.flatnonzero((suite.sin == STRATEGIES.index(sin)) &
                            (suite.sout == STRATEGIES.index(sout)))
        if len(ks) < min_vectors:
            continue
        yield idx, row, sin, sout, suite, \
            ks[np.unique(np.linspace(0, len(ks) - 1, per_group).round().astype(int))]


def samples(models: pd.DataFrame, max_groups: int | None = None) -> list[Sample]:
    """Up to ``PER_GROUP`` vectors spread over each trusted group's tile counts."""
    out = []
    trusted = models[models["trusted"]].reset_index(drop=True)
    if max_groups is not None and len(trusted) > max_groups:
        trusted = trusted.sample(max_groups, random_state=0).reset_index(drop=True)
    for gi, row, sin, sout, suite, pick in group_vectors(trusted):
        for k in pick[np.argsort(suite.ht[pick] * suite.wt[pick])]:
            ht, wt = int(suite.ht[k]), int(suite.wt[k])
            if row["coef"] * ht * wt + row["intercept"] <= 0:
                continue  # the hardware line is not meaningful there
            plan = core_plan(ht, wt, suite.gin, sin, suite.gout, sout)
            tr = traffic(plan)
            out.append(Sample(gi, ht * wt, row["coef"] * ht * wt + row["intercept"],
                              np.array([c.strides for c in plan], dtype=float).ravel(),
                              np.array([c.pages for c in plan], dtype=float).ravel(),
                              float(max(tr.per_source.values())), float(tr.page_hops)))
    return out


def _stack(s: list[Sample]) -> tuple[np.ndarray, ...]:
    """Strides and pages padded to one matrix (rows: vectors; columns: core·RISC)."""
    width = max(len(x.strides) for x in s)
    st, pg = np.zeros((len(s), width)), np.zeros((len(s), width))
    for i, x in enumerate(s):
        st[i, : len(x.strides)] = x.strides
        pg[i, : len(x.pages)] = x.pages
    return st, pg, np.array([x.src_pages for x in s]), np.array([x.page_hops for x in s])


def _predict(theta: np.ndarray, s: list[Sample] | tuple) -> np.ndarray:
    st, pg, src, hops = _stack(s) if isinstance(s, list) else s
    tx, bw, launch, hop = np.exp(theta)
    return launch + np.maximum((tx * st + pg * PAGE / bw).max(axis=1), src * PAGE / (2 * bw)) \
        + hops * PAGE / hop


def fit_params(train: list[Sample], base: WormholeParams | None = None) -> WormholeParams:
    base = base or WormholeParams()
    y = np.log(np.array([x.target_ns for x in train]))
    stacked = _stack(train)

    def loss(theta: np.ndarray) -> float:
        return float(np.mean((np.log(_predict(theta, stacked)) - y) ** 2))

    best = None
    for scale in (1.0, 0.1, 3.0):  # a few starts: the loss has flat directions (tx)
        x0 = np.log([base.tx_ns * scale, base.noc_bw, base.launch_ns * scale,
                     base.hop_bytes_per_cycle * base.aiclk_ghz])
        res = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-6,
                                                                "fatol": 1e-11})
        best = res if best is None or res.fun < best.fun else best
    tx, bw, launch, hop = np.exp(best.x)
    return base.with_free(float(tx), float(bw / base.aiclk_ghz), float(launch),
                          float(hop / base.aiclk_ghz))


def group_report(models: pd.DataFrame, params: WormholeParams,
                 max_groups: int | None = None) -> pd.DataFrame:
    """Per trusted group: the simulator's ns/tile (linear fit over the group's vectors) next to
    the hardware's, with the plan features that explain the difference."""
    rows = []
    trusted = models[models["trusted"]]
    if max_groups is not None and len(trusted) > max_groups:
        trusted = trusted.sample(max_groups, random_state=1)
    for _, row, sin, sout, suite, pick in group_vectors(trusted, min_vectors=2):
        gin, gout = suite.gin, suite.gout
        sims = [simulate(int(suite.ht[k]), int(suite.wt[k]), gin, sin, gout, sout, params)
                for k in pick]
        x = np.array([s.tiles for s in sims], dtype=float)
        t = np.array([s.time_ns for s in sims])
        if np.ptp(x) == 0:
            continue
        coef = float(np.polyfit(x, t, 1)[0])
        last = sims[-1]
        rows.append({"in_grid": row["in_grid"], "out_grid": row["out_grid"],
                     "in": sin, "out": sout, "hw_ns_per_tile": row["coef"],
                     "sim_ns_per_tile": coef, "ratio": coef / row["coef"],
                     "held_out": held_out(row["in_grid"], row["out_grid"]),
                     "bound": "source" if last.src_ns >= last.dest_ns else "destination",
                     "max_strides": last.max_strides, "fan_in": last.fan_in,
                     "fan_out": last.fan_out, "risc_imbalance": round(last.risc_imbalance, 3)})
    return pd.DataFrame(rows)


def calibrate(models_path: str | Path | None = None, max_groups: int | None = 2500,
              report_groups: int | None = None) -> tuple[WormholeParams, pd.DataFrame]:
    models = load_models(models_path)
    models = models.assign(held_out=[held_out(a, b) for a, b in
                                     zip(models["in_grid"], models["out_grid"], strict=True)])
    train = samples(models[~models["held_out"]], max_groups)
    params = fit_params(train)
    return params, group_report(models, params, report_groups)
