"""Reshard results -> the seed's fitting frame, and one model for every grid pair."""

from __future__ import annotations

import numpy as np
import pandas as pd

from opatlas.tenstorrent.calibrate import group_name

RESHARD_SQL = """
SELECT json_extract_string(params_json, '$.input_core_grid') AS in_grid,
       json_extract_string(params_json, '$.output_core_grid') AS out_grid,
       json_extract_string(params_json, '$.input_shard_strategy') AS sin,
       json_extract_string(params_json, '$.output_shard_strategy') AS sout,
       CAST(json_extract(params_json, '$.input_shape[2]') AS BIGINT)
         * CAST(json_extract(params_json, '$.input_shape[3]') AS BIGINT) // 1024 AS tiles,
       mean_ns AS y, device
FROM results WHERE op = 'reshard' AND status = 'ok' AND mean_ns IS NOT NULL
"""


def reshard_frame_from_store(store: object) -> pd.DataFrame:
    """The fitting frame straight from DuckDB (no per-row JSON parsing in Python), with the
    device each row was measured on."""
    df = store.con.execute(RESHARD_SQL).df()  # type: ignore[attr-defined]
    pairs = df[["sin", "sout"]].drop_duplicates()
    names = {(a, b): group_name(a, b) for a, b in pairs.itertuples(index=False)}
    df["group"] = [names[(a, b)] for a, b in zip(df["sin"], df["sout"], strict=True)]
    return df[["in_grid", "out_grid", "group", "tiles", "y", "device"]]


def reshard_frame(results: pd.DataFrame) -> pd.DataFrame:
    """``in_grid, out_grid, group, tiles, y`` (mean kernel ns) from stored reshard results."""
    ok = results[(results["status"] == "ok") & results["mean_ns"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=["in_grid", "out_grid", "group", "tiles", "y"])
    shape = np.array(ok["input_shape"].tolist())
    return pd.DataFrame({
        "in_grid": ok["input_core_grid"].to_numpy(), "out_grid": ok["output_core_grid"].to_numpy(),
        "group": [group_name(a, b) for a, b in zip(ok["input_shard_strategy"],
                                                   ok["output_shard_strategy"], strict=True)],
        "tiles": shape[:, -2] * shape[:, -1] // 1024, "y": ok["mean_ns"].to_numpy()})


def plan_features(rows: pd.DataFrame, params: object = None) -> pd.DataFrame:
    """Transfer-plan features per vector (columns: ht, wt, in_grid, out_grid, sin, sout) and
    the simulator's time with ``params`` (default: the bundled calibrated ones)."""
    from opatlas.tenstorrent.reshard import parse_grid
    from opatlas.tenstorrent.sim import calibrated_params, simulate

    params = params or calibrated_params()
    feats = []
    for r in rows.itertuples(index=False):
        gin, gout = parse_grid(r.in_grid), parse_grid(r.out_grid)
        sim = simulate(int(r.ht), int(r.wt), gin, r.sin, gout, r.sout, params)
        f = sim.features()
        f.update(sim_ns=sim.time_ns, in_x=gin[0], in_y=gin[1], out_x=gout[0], out_y=gout[1],
                 in_cores=gin[0] * gin[1], out_cores=gout[0] * gout[1], ht=r.ht, wt=r.wt,
                 **{f"in_{s}": float(r.sin == s) for s in ("BLOCK", "WIDTH", "HEIGHT")},
                 **{f"out_{s}": float(r.sout == s) for s in ("BLOCK", "WIDTH", "HEIGHT")})
        feats.append(f)
    return pd.DataFrame(feats, index=rows.index)


def hardware_points(models: pd.DataFrame, per_group: int = 8) -> pd.DataFrame:
    """Points on each trusted hardware group line, at tile counts the sweep has for it."""
    from opatlas.tenstorrent.calibrate import MIN_HW_NS, group_vectors

    out = []
    for _, m, sin, sout, suite, pick in group_vectors(models, per_group):
        for k in pick:
            tiles = int(suite.ht[k] * suite.wt[k])
            y = m["coef"] * tiles + m["intercept"]
            if y >= MIN_HW_NS:  # below any real launch time the line is a fit artefact
                out.append({"in_grid": m["in_grid"], "out_grid": m["out_grid"], "sin": sin,
                            "sout": sout, "ht": int(suite.ht[k]), "wt": int(suite.wt[k]),
                            "tiles": tiles, "y": y, "group_rmsre": m["RMSRE"]})
    return pd.DataFrame(out)


def evaluate_one_model(max_groups: int | None = 3000, split: str = "x",
                       params: object = None) -> dict[str, float]:
    """One LightGBM over all grid pairs and strategies on plan features and the simulator's
    time, trained on the split's calibration grid pairs and tested on its test pairs (never
    seen), against hardware; next to the simulator alone (``params``: calibrated on the same
    calibration pairs, or the bundled ones) and the seed's per-group lines (in-sample)."""
    import lightgbm as lgb

    from opatlas.fit.metrics import mape, rmsre
    from opatlas.tenstorrent.calibrate import get_split, load_models

    sp = get_split(split)
    models = load_models()
    if max_groups is not None:
        models = models[models["trusted"]].sample(min(max_groups, int(models["trusted"].sum())),
                                                  random_state=0)
    pts = hardware_points(models)
    pairs = list(zip(pts["in_grid"], pts["out_grid"], strict=True))
    train = np.array([sp.train(a, b) for a, b in pairs], dtype=bool)
    test = np.array([sp.test(a, b) for a, b in pairs], dtype=bool)
    X = plan_features(pts, params)
    X["log_sim_ns"] = np.log(X["sim_ns"])
    gbm = lgb.LGBMRegressor(n_estimators=600, learning_rate=0.05, num_leaves=31,
                            min_child_samples=10, objective="l1", random_state=42, n_jobs=2,
                            verbose=-1)
    # the target is the log of hardware over simulated time: where data run out the model
    # falls back on the physics instead of a constant
    gbm.fit(X[train], np.log(pts["y"][train]) - X["log_sim_ns"][train])
    y = pts["y"][test].to_numpy()
    sim_ns = X["sim_ns"][test].to_numpy()
    one = sim_ns * np.exp(gbm.predict(X[test]))
    t = pts[test]
    ratio = pd.DataFrame({"group": list(zip(t["in_grid"], t["out_grid"], t["sin"], t["sout"],
                                            strict=True)), "one": one / y, "sim": sim_ns / y})
    per_group = ratio.groupby("group")[["one", "sim"]].median()
    return {"split": sp.name, "test_points": int(test.sum()),
            "test_grid_pairs": int(t[["in_grid", "out_grid"]].drop_duplicates().shape[0]),
            "one_model_mape": mape(y, one), "one_model_rmsre": rmsre(y, one),
            "one_model_group_factor": float(np.exp(np.abs(np.log(per_group["one"])).median())),
            "simulator_mape": mape(y, sim_ns), "simulator_rmsre": rmsre(y, sim_ns),
            "simulator_group_factor": float(np.exp(np.abs(np.log(per_group["sim"])).median())),
            "per_group_linear_insample_rmsre_median":
                float(t.drop_duplicates(["in_grid", "out_grid", "sin", "sout"])
                      ["group_rmsre"].median())}
