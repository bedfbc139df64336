"""``opatlas fit``'s splits: a function of the rows' values, not their order; the K a bare
``kfold`` uses said; the parameters the data never varied said once per op."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process
from opatlas.fit.evaluate import Evaluation, evaluate_all, held_constant, held_constant_notes
from opatlas.fit.splits import canonical_order, iter_splits, split_label

LINEAR2 = Path(__file__).parents[1] / "src/opatlas/data/ett-a100/operator" / \
    "NVIDIAA100-SXM4-80GB_linear2_fp16.csv"


def _rows(df: pd.DataFrame, positions: np.ndarray) -> list[tuple]:
    return sorted(map(tuple, df.iloc[positions].to_numpy(float).tolist()))


@pytest.mark.parametrize("split", ["random", "random:0.3", "kfold:4"])
def test_a_split_holds_out_the_same_rows_in_any_order(split):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"b": rng.integers(1, 9, 60), "dim": rng.integers(1, 99, 60) * 64})
    shuffled = df.sample(frac=1, random_state=7).reset_index(drop=True)
    as_floats = shuffled.astype(float)  # a CSV's round trip: 4 reads back as 4.0
    for other in (shuffled, as_floats):
        for (tr, te), (tr2, te2) in zip(iter_splits(df, split), iter_splits(other, split),
                                        strict=True):
            assert _rows(df, te) == _rows(other, te2)
            assert _rows(df, tr) == _rows(other, tr2)


def test_canonical_order_sorts_numbers_as_numbers_then_text_then_extra_keys():
    df = pd.DataFrame({"role": ["qkv", "out", "qkv", "out"], "dim": [128, 64, 64, 128]})
    assert canonical_order(df).tolist() == [1, 2, 3, 0]  # by dim, then role
    assert canonical_order(df[["role"]], np.array([4.0, 3.0, 2.0, 1.0])).tolist() == \
        [3, 1, 2, 0]
    mixed = pd.DataFrame({"p": [10, "auto", 2]}, dtype=object)
    assert canonical_order(mixed).tolist() == [2, 0, 1]


def _toy(n: int = 60) -> pd.DataFrame:
    """One op outside the catalog; each shape measured twice with different times, so a
    split's tie between equal shapes is broken by the time, not by the row order."""
    rows = [{"op": "toy", "pass": "fwd", "device": "NVIDIAA100-SXM4-80GB", "dtype": "fp16",
             "params_json": json.dumps({"a": i % (n // 2), "c": 3}),
             "y_us": 10.0 + (i % (n // 2)) ** 1.5 + 0.37 * (i // (n // 2))} for i in range(n)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("split", ["random", "kfold:3"])
def test_fit_metrics_do_not_depend_on_the_row_order(split):
    df = _toy()
    shuffled = df.sample(frac=1, random_state=3).reset_index(drop=True)
    (a,) = evaluate_all(df, "gbm", split, baseline=False)
    (b,) = evaluate_all(shuffled, "gbm", split, baseline=False)
    assert a.as_json() == b.as_json()  # every metric, to the last digit


def test_fit_cli_gives_one_mape_for_a_shuffled_csv(capsys, tmp_path):
    rows = pd.read_csv(LINEAR2).head(120)
    for name, frame in (("a", rows), ("b", rows.sample(frac=1, random_state=5))):
        (tmp_path / name).mkdir()
        frame.to_csv(tmp_path / name / LINEAR2.name, index=False)
    got = []
    for name in ("a", "b"):
        code, out, err = cli_in_process(capsys, "fit", "--data", str(tmp_path / name),
                                        "--recipe", "gbm", "--json")
        assert code == 0, err
        got.append([(r["pass"], r["mape"], r["baseline_mape"]) for r in json.loads(out)])
    assert got[0] == got[1]


def test_split_label_says_the_default_k_and_fraction():
    assert split_label("kfold") == "kfold:5"
    assert split_label("kfold:3") == "kfold:3"
    assert split_label("kfold:3.0") == "kfold:3"
    assert split_label("extrapolate:dim") == "extrapolate:dim:0.2"
    assert split_label("extrapolate:dim:0.3") == "extrapolate:dim:0.3"
    assert split_label("random") == "random"
    assert split_label("group:g") == "group:g"


def test_fit_names_the_k_a_bare_kfold_used(capsys, tmp_path):
    (tmp_path / "d").mkdir()
    pd.read_csv(LINEAR2).head(60).to_csv(tmp_path / "d" / LINEAR2.name, index=False)
    code, out, err = cli_in_process(capsys, "fit", "--data", str(tmp_path / "d"), "--recipe",
                                    "gbm", "--no-baseline", "--split", "kfold", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert {r["split"] for r in rows} == {"kfold:5"} and {r["n_folds"] for r in rows} == {5}
    code, out, err = cli_in_process(capsys, "fit", "--data", str(tmp_path / "d"), "--recipe",
                                    "gbm", "--no-baseline", "--split", "kfold")
    assert code == 0 and "split kfold:5" in out, out


def _evaluated(df: pd.DataFrame) -> list[Evaluation]:
    keys = df[["op", "pass", "device", "dtype"]].drop_duplicates().itertuples(index=False)
    return [Evaluation(op, p, "gbm", "random", 1, 1, 0, 0, 0, 0, device=d, dtype=t)
            for op, p, d, t in keys]


def test_held_constant_names_the_data_columns_of_one_value():
    df = _toy()
    assert held_constant(df, _evaluated(df)) == {"toy": {"c": ((3,), True)}}
    assert held_constant(df, []) == {}  # only the ops evaluated
    varied = df.assign(params_json=[json.dumps({"a": i, "c": i % 2}) for i in range(len(df))])
    assert held_constant(varied, _evaluated(varied)) == {}


def test_held_constant_names_catalog_parameters_left_out_that_change_the_counts():
    rows = pd.read_csv(LINEAR2).head(20)
    df = pd.DataFrame({"op": "linear_final", "pass": "fwd", "device": "NVIDIAA100-SXM4-80GB",
                       "dtype": "fp16", "y_us": rows["F_dur(us)"],
                       "params_json": [json.dumps({"mp": 1 + i % 2, "b": b, "l": ln, "dim": d})
                                       for i, (b, ln, d) in enumerate(
                                           rows[["b", "l", "dim"]].astype(int).to_numpy()
                                           .tolist())]})
    # vocab sizes the vocab projection; the qkv linear's counts never read it
    assert held_constant(df, _evaluated(df)) == {"linear_final": {"vocab": ((50257,), False)}}
    qkv = df.assign(op="linear1")
    assert "vocab" not in held_constant(qkv, _evaluated(qkv)).get("linear1", {})


def test_fit_says_once_per_op_which_parameters_its_data_held(capsys, tmp_path):
    (tmp_path / "d").mkdir()
    pd.read_csv(LINEAR2).head(60).to_csv(tmp_path / "d" / LINEAR2.name, index=False)
    code, _, err = cli_in_process(capsys, "fit", "--data", str(tmp_path / "d"), "--recipe",
                                  "gbm", "--no-baseline")
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if "never varies" in ln]
    assert notes == ["opatlas: note: linear2: its data never varies mp (1 in all rows), head_dim "
                     "(left out: the catalog's default 0): the model cannot have learned how "
                     "they change the time; a prediction at another value follows the features "
                     "alone"]  # once, though fwd and bwd are two models
    assert held_constant_notes(_toy(), _evaluated(_toy())) == [
        "toy: its data never varies c (3 in all rows): the model cannot have learned how it "
        "changes the time; a prediction at another value follows the features alone"]


def test_the_predictors_own_fits_do_not_depend_on_the_row_order(tmp_path):
    """The models predict (and fit --out) fits: the same rows in another order give the same
    model, prediction for prediction."""
    from opatlas.predict import Predictor

    rows = pd.read_csv(LINEAR2).head(120)
    preds = []
    for name, frame in (("a", rows), ("b", rows.sample(frac=1, random_state=5))):
        (tmp_path / name).mkdir()
        frame.to_csv(tmp_path / name / LINEAR2.name, index=False)
        p = Predictor(data=str(tmp_path / name), recipe="gbm", cache_dir=tmp_path / f"m{name}")
        preds.append(p.predict("linear2", {"mp": [1, 2], "b": [2, 4], "l": [2048, 4096],
                                           "dim": [4096, 8192]}).tolist())
    assert preds[0] == preds[1]
