"""Runtime models: reshard metrics by hand, exact linear recovery, CSV header, splits that never
leak, hybrid extrapolation, registry, predictor, CLI contract."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from opatlas.fit.linear import RESHARD_HEADER, fit_line, fit_linear_groups, write_models_csv
from opatlas.fit.metrics import mape, rmsre, rrmse
from opatlas.fit.registry import ModelRegistry
from opatlas.fit.splits import iter_splits
from opatlas.predict import Predictor


def test_reshard_metrics_by_hand():
    y, yhat = np.array([100.0, 200.0, 400.0]), np.array([110.0, 180.0, 400.0])
    # RMSE = sqrt((100 + 400 + 0) / 3); mean(y) = 700/3
    assert rrmse(y, yhat) == pytest.approx(np.sqrt(500 / 3) / (700 / 3))
    # relative errors 0.1, -0.1, 0
    assert rmsre(y, yhat) == pytest.approx(np.sqrt(0.02 / 3))
    assert mape(y, yhat) == pytest.approx(0.2 / 3)


def test_synthetic_linear_data_is_recovered_exactly():
    rng = np.random.default_rng(0)
    rows = []
    for g, (coef, icpt) in {"a": (2048.0, 900.0), "b": (512.5, 12.0)}.items():
        for tiles in rng.integers(1, 500, 40):
            rows += [{"in_grid": "2x2", "out_grid": "1x4", "group": g, "tiles": int(tiles),
                      "y": coef * tiles + icpt}] * 2
    models = fit_linear_groups(pd.DataFrame(rows), ["in_grid", "out_grid", "group"], "tiles", "y")
    a = models.set_index("group").loc["a"]
    assert a["coef"] == pytest.approx(2048.0) and a["intercept"] == pytest.approx(900.0)
    assert a["r^2"] == pytest.approx(1.0) and a["RMSRE"] == pytest.approx(0.0, abs=1e-12)
    assert models.set_index("group").loc["b", "coef"] == pytest.approx(512.5)
    # points are averaged per distinct tile count, as the seed does
    assert a["num_points"] == len({r["tiles"] for r in rows if r["group"] == "a"})


def test_models_csv_header_is_byte_exact_and_shards(tmp_path):
    models = pd.DataFrame([{"in_grid": "1x1", "out_grid": "2x1", "group": "g", **fit_line(
        np.array([1.0, 2.0, 3.0]), np.array([3.0, 5.0, 7.1]))}] * 5)
    (path,) = write_models_csv(models, tmp_path / "models.csv")
    assert path.read_bytes().split(b"\n")[0] == \
        b"in_grid,out_grid,group,coef,intercept,r^2,RRMSE,RMSRE,num_points"
    parts = write_models_csv(models, tmp_path / "models.csv", shards=3)
    assert [p.name for p in parts] == ["models.csv.0", "models.csv.1", "models.csv.2"]
    assert sum(len(pd.read_csv(p)) for p in parts) == 5
    assert all(list(pd.read_csv(p).columns) == list(RESHARD_HEADER) for p in parts)


def test_extrapolation_split_never_leaks():
    df = pd.DataFrame({"dim": np.repeat(np.arange(2048, 8193, 512), 7), "x": np.arange(91)})
    (train, test), = list(iter_splits(df, "extrapolate:dim:0.2"))
    assert set(df.iloc[train]["dim"]).isdisjoint(df.iloc[test]["dim"])
    assert df.iloc[train]["dim"].max() < df.iloc[test]["dim"].min()
    assert sorted(df.iloc[test]["dim"].unique()) == [7168, 7680, 8192]  # top 3 of 13
    for tr, te in iter_splits(df, "group:dim"):
        assert set(df.iloc[tr]["dim"]).isdisjoint(df.iloc[te]["dim"])
    folds = list(iter_splits(df, "kfold:5"))
    assert sorted(np.concatenate([te for _, te in folds])) == list(range(91))
    from opatlas.errors import OpatlasError

    for split, said in (("group:dmi", "no column 'dmi'"), ("group:", "no column named")):
        with pytest.raises(OpatlasError, match=f"{said}; group by columns the data has "
                                               r"\(dim, x\)"):
            list(iter_splits(df, split))


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    return Predictor(cache_dir=tmp_path_factory.mktemp("models"))


def test_hybrid_grows_with_flops_beyond_the_training_range(predictor):
    dims = np.arange(4096, 32769, 1024)  # training data stops at dim 8192
    shapes = pd.DataFrame({"mp": 1, "b": 4, "l": 2048, "dim": dims})
    t = predictor.predict("linear3", shapes)
    assert np.all(np.diff(t[dims >= 8192]) > 0)
    # beyond the range the time scales like the FLOPs (4·dim² per token): ×4 from 16k to 32k
    assert t[-1] / t[dims == 16384][0] == pytest.approx(4.0, rel=0.15)
    gbm = Predictor(recipe="gbm", cache_dir=predictor.registry.root)
    flat = gbm.predict("linear3", shapes)
    assert flat[-1] / flat[dims == 16384][0] < 1.2  # trees clamp: ~flat where FLOPs grow 4x


def test_predictor_is_vectorised_and_accepts_catalog_names(predictor):
    shapes = {"mp": [1, 2, 4], "b": [4, 4, 4], "h": [32, 32, 32], "l": [4096] * 3,
              "dim": [4096] * 3}
    t = predictor.predict("flash_attention", shapes, pass_="bwd")
    assert t.shape == (3,) and np.all(t > 0) and t[0] > t[1] > t[2]
    one = predictor.predict("linear", [{"mp": 1, "b": 1, "l": 2048, "dim": 4096, "role": "qkv"}])
    assert one[0] == pytest.approx(predictor.predict("linear1", [{"mp": 1, "b": 1, "l": 2048,
                                                                  "dim": 4096}])[0])


def test_registry_refits_stale_models_and_warns_on_other_versions(tmp_path):
    reg = ModelRegistry(tmp_path)
    calls = []

    def fit():
        calls.append(1)
        return {"n": len(calls)}

    assert reg.get_or_fit(("d", "op"), "hash1", None, fit) == {"n": 1}
    assert reg.get_or_fit(("d", "op"), "hash1", None, fit) == {"n": 1}  # cached
    assert reg.get_or_fit(("d", "op"), "hash2", None, fit) == {"n": 2}  # data changed
    import joblib

    saved = joblib.load(reg.path("d", "op"))
    saved["meta"]["versions"]["lightgbm"] = "0.0.1"
    joblib.dump(saved, reg.path("d", "op"))
    with pytest.warns(UserWarning, match="refitting"):
        assert reg.get_or_fit(("d", "op"), "hash2", None, fit) == {"n": 3}
    assert str(tmp_path) in str(reg.path("d", "op"))


def test_default_cache_is_outside_the_package():
    import opatlas
    from opatlas.fit.registry import default_cache_dir

    pkg = str(opatlas.__file__).rsplit("/", 1)[0]
    assert not str(default_cache_dir()).startswith(pkg)


def test_fit_cli_json_contract():
    with warnings.catch_warnings():
        proc = run_cli("fit", "--op", "gelu", "--op", "res_add", "--json", check=True)
    rows = json.loads(proc.stdout)
    assert {(r["op"], r["pass"]) for r in rows} == {("gelu", "fwd"), ("gelu", "bwd"),
                                                    ("res_add", "fwd"), ("res_add", "bwd")}
    for r in rows:
        assert {"op", "pass", "recipe", "split", "n_train", "n_test", "mape", "rmsre", "r2",
                "baseline_mape"} <= set(r)
        assert r["mape"] < 0.05 and r["baseline_mape"] is not None
        assert r["n_train"] + r["n_test"] == {"gelu": 1755, "res_add": 351}[r["op"]]
        assert r["split"] == "random"
        # gelu and res_add are labelled by (mp, b, l, dim) but their kernel work is a count
        # of elements: most test rows have training twins, and the model is near their floor
        assert r["twin_n"] > 0.3 * r["n_test"]
        assert r["twin_model_mape"] < r["twin_mape"] + 0.01


def test_predicting_no_shapes_gives_no_times():
    pred = Predictor()  # the user cache the suite shares: its gelu model is fitted once
    empty = pd.DataFrame({"mp": [], "b": [], "l": [], "dim": []}, dtype=int)
    assert pred.predict("gelu", empty).shape == (0,)


def test_twin_predictions_by_hand():
    from opatlas.fit.evaluate import twin_predictions

    keys = np.array([0, 0, 1, 2, 0, 1, 3])
    y = np.array([10.0, 12.0, 5.0, 7.0, 11.0, 6.0, 9.0])
    train, test = np.array([0, 1, 2, 3]), np.array([4, 5, 6])
    has, mean = twin_predictions(keys, y, train, test)
    assert has.tolist() == [0, 1]  # the key-3 row has no twin in training
    assert mean.tolist() == [11.0, 5.0]  # mean of 10 and 12; the lone 5


def test_predict_cli(tmp_path):
    out = json.loads(run_cli("predict", "gelu", "--shape", "mp=1", "--shape", "b=4", "--shape",
                             "l=2048", "--shape", "dim=4096", "--json", check=True).stdout)
    assert set(out["us"]) == {"fwd", "bwd"} and out["us"]["fwd"] > 0
    bad = run_cli("predict", "nosuchop", "--shape", "b=1")
    assert bad.returncode == 2 and "known ops" in bad.stderr


def test_distinct_rows_round_trips_including_wide_tables():
    from opatlas.columns import distinct_rows

    rng = np.random.default_rng(1)
    small = pd.DataFrame({"a": rng.integers(0, 3, 1000), "b": rng.choice(["x", "y"], 1000),
                          "c": rng.choice([0.5, 1.5], 1000)})
    # 12 columns of ~200k values each overflow one int64 key and take the recode path
    wide = pd.DataFrame({f"c{i}": rng.integers(0, 200_000, 5000) for i in range(12)})
    wide = pd.concat([wide, wide.iloc[:300]], ignore_index=True)
    for table in (small, wide):
        first, codes = distinct_rows(table)
        assert len(first) == len(table.drop_duplicates())
        back = table.iloc[first].iloc[codes].reset_index(drop=True)
        pd.testing.assert_frame_equal(back, table.reset_index(drop=True))
        assert (np.sort(first) == first).all()  # first occurrences, in order of appearance


def test_tree_count_stops_early_on_noise_and_grows_on_signal():
    from opatlas.fit.recipes import MIN_TREES, _tree_count

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"x": rng.uniform(0, 10, 2000), "z": rng.uniform(0, 1, 2000)})
    noise = _tree_count(X, rng.normal(size=2000))
    signal = _tree_count(X, np.sin(X["x"].to_numpy()) + X["z"].to_numpy() ** 2)
    assert noise <= 3 * MIN_TREES  # nothing to learn: stop almost at once
    assert signal > 4 * noise


def test_models_cached_by_an_older_recipe_revision_are_refitted(tmp_path, monkeypatch):
    import joblib

    import opatlas.predict.predictor as predictor_mod

    Predictor(cache_dir=tmp_path).model("gelu", "fwd")
    (path,) = tmp_path.rglob("*.joblib")
    assert joblib.load(path)["meta"]["data_hash"].endswith(f":r{predictor_mod.RECIPE_REVISION}")
    monkeypatch.setattr(predictor_mod, "RECIPE_REVISION", "next")
    Predictor(cache_dir=tmp_path).model("gelu", "fwd")
    assert joblib.load(path)["meta"]["data_hash"].endswith(":rnext")  # refitted and replaced


def test_linear_groups_held_out_metrics_and_generic_columns(tmp_path):
    from opatlas.fit.linear import heldout_linear_groups

    sizes = np.arange(1, 41)
    exact = pd.DataFrame({"kernel": "copy", "bytes": sizes, "ns": 3.0 * sizes + 50.0})
    curved = pd.DataFrame({"kernel": "gather", "bytes": sizes, "ns": 2.0 * sizes**2 + 10.0})
    tiny = pd.DataFrame({"kernel": "tiny", "bytes": [1, 2], "ns": [5.0, 7.0]})
    df = pd.concat([exact, exact, curved, tiny], ignore_index=True)  # copy measured twice
    held = heldout_linear_groups(df, ["kernel"], "bytes", "ns", "random").set_index("kernel")
    # a line through exact points predicts unseen sizes exactly; 20% of 40 sizes are held out
    assert held.loc["copy", "heldout_RMSRE"] == pytest.approx(0.0, abs=1e-12)
    assert held.loc["copy", "heldout_r^2"] == pytest.approx(1.0)
    assert held.loc["copy", "heldout_points"] == 8
    # a line through a parabola misses held-out sizes, worse than in-sample
    models = fit_linear_groups(df, ["kernel"], "bytes", "ns").set_index("kernel")
    assert held.loc["gather", "heldout_RMSRE"] > 0.05
    assert held.loc["gather", "heldout_RRMSE"] > 0.5 * models.loc["gather", "RRMSE"]
    assert held.loc["tiny", "heldout_points"] == 0 and np.isnan(held.loc["tiny", "heldout_RMSRE"])
    # the extrapolation split tests on the largest sizes, never seen in training
    top = heldout_linear_groups(curved, ["kernel"], "bytes", "ns", "extrapolate:bytes:0.25")
    assert top.loc[0, "heldout_points"] == 10
    # the CLI: generic group columns give a generic header; held-out metrics beside the models
    src = tmp_path / "runs.csv"
    df.to_csv(src, index=False)
    out = tmp_path / "models.csv"
    rows = json.loads(run_cli("fit", "--data", str(src), "--recipe", "reshard", "--group-by",
                              "kernel", "--size", "bytes", "--time", "ns", "--out", str(out),
                              "--json", check=True).stdout.splitlines()[-1])
    assert out.read_text().splitlines()[0] == "kernel,coef,intercept,r^2,RRMSE,RMSRE,num_points"
    by = {r["kernel"]: r for r in rows}
    assert by["copy"]["coef"] == pytest.approx(3.0) and by["copy"]["heldout_points"] == 8
    assert (tmp_path / "models.heldout.csv").exists()
    bad = run_cli("fit", "--data", str(src), "--recipe", "reshard")
    assert bad.returncode == 2 and "in_grid" in bad.stderr and "--group-by" in bad.stderr


def test_reshard_fit_says_why_a_held_out_r2_is_missing(tmp_path):
    """Five sizes a group and a 20% split hold out one size: r² is undefined there, said so
    rather than printed as nan."""
    src = tmp_path / "runs.csv"
    pd.DataFrame([{"kernel": k, "bytes": n * 1024, "ns": 1000 + 10 * n * (i + 1)}
                  for i, k in enumerate("abc") for n in (1, 2, 4, 8, 16)]).to_csv(src, index=False)
    out = run_cli("fit", "--data", str(src), "--recipe", "reshard", "--group-by", "kernel",
                  "--size", "bytes", "--time", "ns", check=True).stdout
    assert "median r² n/a (no group holds out 2 sizes)" in out and "nan" not in out
    assert "in-sample median r² 1.0000" in out  # exact lines


def test_small_fits_run_on_one_thread_and_give_the_same_trees():
    """A fit below SMALL_FIT_ROWS takes one thread (no OpenMP barriers to stall on a busy
    machine); LightGBM's trees do not depend on it, so nothing cached changes."""
    import lightgbm as lgb

    from opatlas.fit.recipes import GBM_PARAMS, SMALL_FIT_ROWS, gbm_params

    assert gbm_params(SMALL_FIT_ROWS - 1)["n_jobs"] == 1
    assert gbm_params(SMALL_FIT_ROWS)["n_jobs"] == GBM_PARAMS["n_jobs"] == 2
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.uniform(1, 100, size=(600, 3)), columns=["a", "b", "c"])
    y = np.log(X["a"] * X["b"] + rng.normal(0, 1, 600) ** 2)
    preds = [lgb.LGBMRegressor(**{**GBM_PARAMS, "n_jobs": n}, n_estimators=200).fit(X, y)
             .predict(X) for n in (1, 2)]
    np.testing.assert_array_equal(preds[0], preds[1])


def test_reshard_shards_split_as_the_seed_and_json_is_alone_on_stdout(tmp_path, capsys):
    """models.csv.i holds rows i·N//k .. (i+1)·N//k (the seed's slices: 14 rows in 12 files
    give 1,1,1,1,1,2,1,1,1,1,1,2); with --json the files written are said on stderr."""
    from conftest import cli_in_process

    src = tmp_path / "runs.csv"
    pd.DataFrame([{"kernel": f"k{j:02d}", "bytes": n * 1024, "ns": 1000 + 10 * n * (j + 1)}
                  for j in range(14) for n in (1, 2, 4, 8, 16)]).to_csv(src, index=False)
    out = tmp_path / "m.csv"
    code, stdout, err = cli_in_process(
        capsys, "fit", "--data", str(src), "--recipe", "reshard", "--group-by", "kernel",
        "--size", "bytes", "--time", "ns", "--out", str(out), "--shards", "12", "--json")
    assert code == 0, err
    assert len(json.loads(stdout)) == 14  # nothing but the JSON
    assert f"{out}.0" in err and str(tmp_path / "m.heldout.csv") in err
    sizes = [len(pd.read_csv(tmp_path / f"m.csv.{i}")) for i in range(12)]
    assert sizes == [(i + 1) * 14 // 12 - i * 14 // 12 for i in range(12)]
    assert sizes == [1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 2]
    code, _, err = cli_in_process(
        capsys, "fit", "--data", str(src), "--recipe", "reshard", "--group-by", "kernel",
        "--size", "bytes", "--time", "ns", "--out", str(tmp_path / "w.csv"), "--shards", "20")
    assert code == 0 and "--shards 20: 6 of the files hold no model" in err
