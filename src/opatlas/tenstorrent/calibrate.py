"""Calibrate the simulator's free parameters against hardware measurements, and say how well
it extrapolates.

Targets: the seed's per-group linear models ``t = coef·tiles + intercept`` fitted on real
Wormhole b0 cards, evaluated at up to ``PER_GROUP`` tile counts the sweep has for that group.
Groups whose hardware fit is poor (coef ≤ 0, r² < 0.9, RMSRE > 0.25) are left out. The loss
(log space) weighs each group's simulated slope (ns per tile, what the seed's models report)
against the hardware's, plus the points themselves.

Splits (``SPLITS``): ``x`` calibrates on input grids with x ≤ 2 and tests on x = 3..4 (how the
simulator is used: on grids larger than those measured), ``y`` the same for y ≤ 2 → y = 3..4,
``random`` holds out 20% of the grid pairs at random, ``all`` fits everything (in-sample).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from opatlas.errors import OpatlasError
from opatlas.tenstorrent import sim
from opatlas.tenstorrent.plan import core_plan
from opatlas.tenstorrent.reshard import STRATEGIES, Suite, expand_suite, parse_grid
from opatlas.tenstorrent.sim import WormholeParams

PER_GROUP = 8
MIN_HW_NS = 500.0  # below any real launch time a point on a hardware line is a fit artefact
# the box the fit searches, per free parameter in ``sim.FREE``'s order and unit
LOWER = (8.0, 8.0, 1e-3, 1e-3, 1e-4, 1e-3, 30.0, 1e-4, 50.0, 1.0)
UPPER = (64.0, 64.0, 2000.0, 2000.0, 200.0, 2000.0, 1e5, 100.0, 5000.0, 64.0)
BOUND_TOL = 1e-3  # a fitted value within 0.1% of a bound is at it


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


def _axis(grid: str, k: int) -> int:
    return parse_grid(grid)[k]


@dataclass(frozen=True)
class Split:
    name: str
    description: str
    train: Callable[[str, str], bool]
    test: Callable[[str, str], bool]


SPLITS = {
    "x": Split("x", "calibrate on input grids with x <= 2, test on x = 3..4",
               lambda a, b: _axis(a, 0) <= 2, lambda a, b: 3 <= _axis(a, 0) <= 4),
    "y": Split("y", "calibrate on input grids with y <= 2, test on y = 3..4",
               lambda a, b: _axis(a, 1) <= 2, lambda a, b: 3 <= _axis(a, 1) <= 4),
    "random": Split("random", "calibrate on 80% of the grid pairs, test on the other 20%",
                    lambda a, b: not held_out(a, b), held_out),
    "all": Split("all", "calibrate on every trusted group, residuals in-sample",
                 lambda a, b: True, lambda a, b: True),
}


def get_split(name: str) -> Split:
    if name not in SPLITS:
        raise OpatlasError(f"calibration split {name!r} is not one of {', '.join(SPLITS)}")
    return SPLITS[name]


def load_models(path: str | Path | None = None) -> pd.DataFrame:
    """The seed's models CSV, with ``trusted`` marking the groups good enough to calibrate on."""
    p = Path(path) if path is not None else bundled_models()
    try:
        df = pd.read_csv(p)
    except (OSError, ValueError) as e:
        raise OpatlasError(f"{p}: cannot read the reshard models CSV ({e})") from e
    need = ("in_grid", "out_grid", "group", "coef", "intercept", "r^2", "RMSRE")
    if missing := [c for c in need if c not in df.columns]:
        found = ", ".join(map(str, df.columns)) or "no columns"
        raise OpatlasError(f"{p}: the reshard models CSV lacks the columns "
                           f"{', '.join(missing)} (found: {found}; expected the header "
                           f"in_grid,out_grid,group,coef,intercept,r^2,RRMSE,RMSRE,num_points)")
    if df.empty:
        raise OpatlasError(f"{p}: the reshard models CSV holds no models")
    _check_model_rows(df, p)
    df["trusted"] = (df["coef"] > 0) & (df["r^2"] >= 0.9) & (df["RMSRE"] <= 0.25)
    return df


def _check_model_rows(df: pd.DataFrame, path: Path) -> None:
    """Every cell the calibration reads is what it must be, else one error naming the file,
    the line, the column and the value (numbers made numeric in ``df``)."""
    def bad(i: int, col: str, why: str) -> OpatlasError:
        return OpatlasError(f"{path}: line {i + 2}: {col} {df[col].iloc[i]!r} {why}")

    for col in ("coef", "intercept", "r^2", "RMSRE"):
        x = pd.to_numeric(df[col], errors="coerce")
        if (wrong := np.flatnonzero(x.isna().to_numpy() | ~np.isfinite(x.to_numpy(float)))).size:
            raise bad(int(wrong[0]), col, "is not a number")
        df[col] = x
    for i in range(len(df)):
        for col in ("in_grid", "out_grid"):
            try:
                parse_grid(df[col].iloc[i])
            except ValueError:
                raise bad(i, col, "is not a core grid XxY (e.g. 7x1)") from None
        try:
            strategies = parse_group(str(df["group"].iloc[i]))
        except IndexError:
            strategies = ("",)
        if not set(strategies) <= set(STRATEGIES):
            raise bad(i, "group", f"is not a strategy pair such as "
                                  f"{group_name('HEIGHT', 'BLOCK')!r}")


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


@dataclass
class Samples:
    """Hardware points and what each asks of the simulator's resources (parameter-free).

    ``risc``: for each point, the distinct reading RISCs that could be the slowest, as rows of
    (reads, requests, request·hops, bytes), padded with zeros (points × candidates × 4)."""

    groups: pd.DataFrame   # one row per group: grids, strategies, hw coef, gather degree
    group: np.ndarray      # group row of each point
    tiles: np.ndarray
    target_ns: np.ndarray
    risc: np.ndarray
    src_bytes: np.ndarray
    links: np.ndarray      # candidate busiest links: (bytes, requests), padded with zeros
    mesh: np.ndarray       # (byte-hops, request-hops) of each point

    def take(self, mask_groups: np.ndarray) -> Samples:
        keep = mask_groups[self.group]
        remap = np.cumsum(mask_groups) - 1
        return Samples(self.groups[mask_groups].reset_index(drop=True), remap[self.group[keep]],
                       self.tiles[keep], self.target_ns[keep], self.risc[keep],
                       self.src_bytes[keep], self.links[keep], self.mesh[keep])


def _candidates(rows: np.ndarray) -> np.ndarray:
    """Rows not dominated in every column by another (only these can be the slowest)."""
    rows = np.unique(rows, axis=0)
    rows = rows[rows.sum(1) > 0]
    keep = [i for i, r in enumerate(rows)
            if not np.any(np.all(rows >= r, axis=1) & np.any(rows > r, axis=1))]
    return rows[keep]


def samples(models: pd.DataFrame, max_groups: int | None = None, seed: int = 0) -> Samples:
    """Up to ``PER_GROUP`` points spread over each trusted group's tile counts."""
    trusted = models[models["trusted"]]
    if max_groups is not None and len(trusted) > max_groups:
        trusted = trusted.sample(max_groups, random_state=seed)
    groups, gid, tiles, target, cands, src, link, mesh = [], [], [], [], [], [], [], []
    p = WormholeParams()
    for _, row, sin, sout, suite, pick in group_vectors(trusted, min_vectors=2):
        rows = []
        for k in pick[np.argsort(suite.ht[pick] * suite.wt[pick])]:
            ht, wt = int(suite.ht[k]), int(suite.wt[k])
            y = row["coef"] * ht * wt + row["intercept"]
            if y < MIN_HW_NS:
                continue
            ld = sim.loads(sim.flows(core_plan(ht, wt, suite.gin, sin, suite.gout, sout)),
                           p.tile_bytes, p.burst_bytes)
            rows.append((ht * wt, y, _candidates(np.stack([ld.reads, ld.requests,
                                                            ld.request_hops, ld.bytes], 1)),
                         ld.src_port_bytes,
                         _candidates(np.stack([ld.link_bytes, ld.link_requests], 1)), ld.fan_in,
                         (ld.byte_hops, ld.request_hop_total)))
        if len({r[0] for r in rows}) < 2:
            continue  # no slope to compare
        g = len(groups)
        groups.append({"in_grid": row["in_grid"], "out_grid": row["out_grid"], "in": sin,
                       "out": sout, "hw_ns_per_tile": row["coef"],
                       "gather_degree": max(r[5] for r in rows)})
        for t, y, c, s, lk, _, mh in rows:
            mesh.append(mh)
            gid.append(g)
            tiles.append(t)
            target.append(y)
            cands.append(c)
            src.append(s)
            link.append(lk)
    return Samples(pd.DataFrame(groups), np.array(gid), np.array(tiles, dtype=float),
                   np.array(target), _pad(cands, 4), np.array(src), _pad(link, 2),
                   np.array(mesh, dtype=float).reshape(-1, 2))


def _pad(rows: list[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(rows), max((len(r) for r in rows), default=0), width))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def predict(p: WormholeParams, s: Samples) -> np.ndarray:
    r = s.risc
    per_risc = sim.risc_ns(p, r[..., 0], r[..., 1], r[..., 2], r[..., 3]).max(axis=1)
    per_link = sim.link_ns(p, s.links[..., 0], s.links[..., 1]).max(axis=1)
    return sim.combine(p, per_risc, s.src_bytes / p.port_bw, per_link,
                       sim.mesh_ns(p, s.mesh[:, 0], s.mesh[:, 1]))


def slopes(s: Samples, t: np.ndarray) -> np.ndarray:
    """Least-squares ns per tile of ``t`` within each group (what the seed's models fit)."""
    n = np.bincount(s.group)
    dx = s.tiles - (np.bincount(s.group, s.tiles) / n)[s.group]
    return np.bincount(s.group, dx * t) / np.bincount(s.group, dx * dx)


def fit_params(train: Samples, base: WormholeParams | None = None) -> WormholeParams:
    """Log-space least squares over the free parameters (Nelder-Mead from a few starts)."""
    base = base or WormholeParams()
    y = np.log(train.target_ns)
    hw = np.log(train.groups["hw_ns_per_tile"].to_numpy())
    lo, hi = np.log(LOWER), np.log(UPPER)

    def loss(theta: np.ndarray) -> float:
        p = base.with_free(np.exp(np.clip(theta, lo, hi)))
        t = predict(p, train)
        s = slopes(train, t)
        slope_err = np.log(np.maximum(s, 1e-3)) - hw
        return float(np.mean((np.log(t) - y) ** 2) + np.mean(slope_err ** 2)
                     + np.sum(np.maximum(theta - hi, 0) + np.maximum(lo - theta, 0)))

    best = None
    for scale in (1.0, 0.3, 3.0):  # a few starts: the loss has flat directions
        x0 = np.log(base.free() * np.array([1, 1, scale, scale, scale, scale, 1, scale, 1, 1]))
        res = minimize(loss, x0, method="Nelder-Mead",
                       options={"maxiter": 3000, "xatol": 1e-4, "fatol": 1e-8})
        best = res if best is None or res.fun < best.fun else best
    return base.with_free(np.exp(np.clip(best.x, lo, hi)))


def group_report(s: Samples, p: WormholeParams) -> pd.DataFrame:
    """Per group: simulated ns/tile next to the hardware's, their ratio and the gather degree."""
    out = s.groups.copy()
    out["sim_ns_per_tile"] = slopes(s, predict(p, s))
    out["ratio"] = out["sim_ns_per_tile"] / out["hw_ns_per_tile"]
    return out


def factor(ratio: pd.Series | np.ndarray) -> float:
    """exp(median |log ratio|): the typical factor between simulated and measured."""
    r = np.asarray(ratio, dtype=float)
    return float(np.exp(np.median(np.abs(np.log(np.clip(r, 1e-6, None))))))


def summarise(rep: pd.DataFrame) -> dict[str, Any]:
    """Median factor and median ratio overall, by gather degree and by strategy pair."""
    def table(by: str | list[str]) -> pd.DataFrame:
        return rep.groupby(by).agg(groups=("ratio", "size"), median_ratio=("ratio", "median"),
                                   factor=("ratio", factor))

    by_degree = table("gather_degree")
    return {"groups": len(rep), "median_factor": factor(rep["ratio"]),
            "median_ratio": float(rep["ratio"].median()),
            "worst_degree_factor": float(np.exp(np.abs(np.log(by_degree["median_ratio"]))).max())
            if len(by_degree) else float("nan"),
            "by_degree": by_degree, "by_strategy": table(["in", "out"])}


@dataclass(frozen=True)
class AtBound:
    """A fitted parameter that landed on a bound of the search (``side``: lower or upper)."""

    name: str
    value: float
    bound: float
    side: str

    def warning(self) -> str:
        unit = sim.MEANING[self.name][1]
        return (f"{self.name} = {self.value:.7g} {unit} is at the {self.side} bound "
                f"{self.bound:g} of the calibration's search: the fitted value stands in for "
                f"effects the model lacks, not a physical bandwidth or cost of the chip")


def at_bounds(p: WormholeParams) -> list[AtBound]:
    """The free parameters of ``p`` within ``BOUND_TOL`` (relative) of a search bound."""
    hits = []
    for name, lo, hi in zip(sim.FREE, LOWER, UPPER, strict=True):
        v = float(getattr(p, name))
        for bound, side in ((lo, "lower"), (hi, "upper")):
            if abs(v - bound) <= BOUND_TOL * bound:
                hits.append(AtBound(name, v, bound, side))
    return hits


@dataclass
class Calibration:
    split: Split
    params: WormholeParams
    train: pd.DataFrame   # per-group report on the calibration groups
    test: pd.DataFrame    # per-group report on the test groups
    at_bounds: list[AtBound] = field(default_factory=list)  # fitted values on a search bound

    def notes(self) -> dict[str, dict[str, Any]]:
        """What a parameters file records of the fit (``sim.NOTES``): each parameter at a
        bound, with the bound and the warning."""
        if not self.at_bounds:
            return {}
        return {"at_search_bound": {b.name: {"value": b.value, "bound": b.bound,
                                             "side": b.side, "warning": b.warning()}
                                    for b in self.at_bounds}}


def calibrate(models_path: str | Path | None = None, split: str = "x",
              max_groups: int | None = 3000) -> Calibration:
    """Fit on the split's calibration groups; report per group on both sides."""
    sp = get_split(split)
    models = load_models(models_path)
    s = samples(models, max_groups)
    pairs = list(zip(s.groups["in_grid"], s.groups["out_grid"], strict=True))
    train_mask = np.array([sp.train(a, b) for a, b in pairs], dtype=bool)
    test_mask = np.array([sp.test(a, b) for a, b in pairs], dtype=bool)
    if not train_mask.any() or not test_mask.any():
        raise OpatlasError(f"calibration split {split!r} leaves no groups to "
                           f"{'calibrate on' if not train_mask.any() else 'test on'}")
    train = s.take(train_mask)
    params = fit_params(train)
    return Calibration(sp, params, group_report(train, params),
                       group_report(s.take(test_mask), params), at_bounds(params))


def format_report(cal: Calibration) -> str:
    """The split, the fitted parameters with their meaning and units, and the residuals
    (simulated / measured ns per tile) grouped by gather degree and by strategy pair."""
    lines = [f"split {cal.split.name}: {cal.split.description}", "",
             "fitted parameters:"]
    for k in sim.FREE:
        meaning, unit = sim.MEANING[k]
        lines.append(f"  {k:22s} {getattr(cal.params, k):10.4g} {unit:17s} {meaning}")
    if cal.at_bounds:
        lines += ["", "at a bound of the search:"] + [f"  {b.warning()}" for b in cal.at_bounds]
    for name, rep in (("calibration groups", cal.train), ("test groups", cal.test)):
        s = summarise(rep)
        lines += ["", f"{name}: {s['groups']} groups, sim/hw ns per tile: median factor "
                  f"{s['median_factor']:.3f} (exp median |log ratio|), median ratio "
                  f"{s['median_ratio']:.3f}, worst gather-degree median off by "
                  f"{s['worst_degree_factor']:.2f}x"]
        if name == "test groups":
            lines += ["", "by gather degree (input cores per output core):",
                      _table(s["by_degree"]), "", "by strategy pair:", _table(s["by_strategy"])]
    return "\n".join(lines)


def _table(df: pd.DataFrame) -> str:
    return df.rename(columns={"median_ratio": "median sim/hw", "factor": "median factor"}) \
        .to_string(float_format=lambda v: f"{v:.3f}")
