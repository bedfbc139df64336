"""Reviewed defects of predict, fit, sweep specs and custom ops: catalog defaults in predict,
fold-consistent row counts, an unknown dtype, fit's choices checked first, duplicate YAML keys,
a custom op named like a built-in one."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process, one_error, run_cli, write_spec
from opatlas.errors import OpatlasError, SpecError

BMM = "b=4,h=32,l=2048,dim=4096"


# 1: parameters with catalog defaults are optional in predict, and said ---------------------
def test_predict_fills_catalog_defaults_and_says_them(capsys):
    code, out, err = cli_in_process(capsys, "predict", "bmm", "--shape", BMM, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["defaults"] == {"mp": 1} and got["shape"]["mp"] == 1
    assert "using the catalog's default(s) mp=1" in err
    code, out, err = cli_in_process(capsys, "predict", "bmm", "--shape", f"{BMM},mp=1", "--json")
    assert code == 0 and json.loads(out)["us"] == got["us"]  # the same as giving mp=1
    assert json.loads(out)["defaults"] == {} and "default" not in err
    code, out, err = cli_in_process(capsys, "predict", "fillmask", "--shape", "b=4,h=32,l=2048",
                                    "--json")
    assert code == 0, err
    assert json.loads(out)["defaults"] == {"dim": 0, "mp": 1}
    assert set(json.loads(out)["us"]) == {"fwd", "bwd"}


def test_predict_still_requires_parameters_without_a_default(capsys):
    one_error(*cli_in_process(capsys, "predict", "bmm", "--shape", "b=4,h=32,dim=4096")[::2],
              "op 'bmm' takes shape parameters", "missing l")


def test_shape_defaults_are_the_catalogs_for_what_the_data_measured():
    from opatlas.predict import Predictor

    pred = Predictor()
    assert pred.shape_defaults("bmm", ["b", "h", "l", "dim"]) == {"mp": 1}
    assert pred.shape_defaults("bmm", ["b", "h", "l", "dim", "mp"]) == {}
    # an alias's fixed parameters are not defaults; the data's optimizers need dim, encoders
    assert pred.shape_defaults("middleStage_optimizer", [], pass_="step") == \
        {"mp": 1, "dim": 0, "encoders": 0}


# 2: row counts over folds --------------------------------------------------------------------
class _Mean:
    """A stand-in model (no fitting): predicts 1 µs, so only the split is exercised."""

    recipe = "gbm"

    def fit(self, shapes, y):
        return self

    def predict(self, shapes):
        return np.ones(len(shapes))


def _frame(groups: dict[int, int]) -> pd.DataFrame:
    """``groups``: value of ``g`` -> rows; one op, one pass, a catalog device."""
    rows = [{"op": "toy", "pass": "fwd", "device": "NVIDIAA100-SXM4-80GB", "dtype": "fp16",
             "params_json": json.dumps({"g": g, "x": i}), "y_us": 1.0 + i}
            for g, n in groups.items() for i in range(n)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("split", "groups", "n_train", "n_test", "n_folds"), [
    # 53 rows in 5 folds of 11, 11, 11, 10, 10: trained on 42, 42, 42, 43, 43 (mean 42.4)
    ("kfold:5", {0: 53}, 42, 53, 5),
    # leave one group out of 10, 20, 30 rows: trained on 50, 40, 30
    ("group:g", {1: 10, 2: 20, 3: 30}, 40, 60, 3),
    ("random:0.2", {0: 50}, 40, 10, 1),
])
def test_fold_counts_are_a_mean_per_fold_beside_all_folds_test_rows(
        monkeypatch, split, groups, n_train, n_test, n_folds):
    import opatlas.fit.evaluate as ev

    monkeypatch.setattr(ev, "make_model", lambda *args: _Mean())
    (e,) = ev.evaluate_all(_frame(groups), "gbm", split, baseline=False)
    assert (e.n_train, e.n_test, e.n_folds) == (n_train, n_test, n_folds)
    assert e.as_json()["n_folds"] == n_folds


def test_fit_table_labels_the_fold_counts():
    from opatlas.cli.fit_cmd import _counts_note

    assert _counts_note([{"n_folds": 5}]).startswith("5 folds: train is the mean rows")
    assert _counts_note([{"n_folds": 3}, {"n_folds": 4}]).startswith("3 to 4 folds")
    assert "fitted on and held out" in _counts_note([{"n_folds": 1}])


# 3: an unknown dtype is named as such --------------------------------------------------------
def test_unknown_dtype_is_named_with_the_known_ones(capsys):
    one_error(*cli_in_process(capsys, "predict", "bmm", "--shape", BMM, "--dtype",
                              "fp17")[::2], "dtype 'fp17': unknown dtype", "fp16", "bf16")
    from opatlas.predict import Predictor

    with pytest.raises(OpatlasError, match="dtype 'fp17': unknown dtype; known: fp64"):
        Predictor(dtype="fp17").check_device()


# 4: fit's --split and --recipe are checked before any data is read ---------------------------
@pytest.mark.parametrize(("args", "needles"), [
    (("--split", "nonsense"), ("unknown split 'nonsense'", "kfold:K", "group:COL")),
    (("--split", "kfold:1"), ("kfold:1", "K must be a whole number >= 2")),
    (("--split", "random:2"), ("random:2", "fraction must be in (0, 1)")),
    (("--split", "extrapolate"), ("extrapolate", "name the column")),
    (("--recipe", "nonsense"), ("--recipe 'nonsense'", "ett, gbm, hybrid, reshard")),
])
def test_fit_refuses_a_bad_split_or_recipe_before_reading_data(monkeypatch, capsys, args,
                                                                needles):
    import opatlas.fit.data

    def never(*a, **k):
        raise AssertionError("the data was read before the options were checked")

    monkeypatch.setattr(opatlas.fit.data, "load_op_data", never)
    one_error(*cli_in_process(capsys, "fit", *args)[::2], *needles)


# 5: a key given twice in a YAML spec ---------------------------------------------------------
DUP = "op: linear\nparams:\n  b: [1, 2]\n  l: [128]\n  dim: [512]\n  l: [256]\nrepeats: 2\n"


def test_a_duplicate_key_is_refused_with_its_file_path_and_lines(tmp_path, capsys):
    from opatlas.spec import load_spec

    path = tmp_path / "dup.yml"
    path.write_text(DUP)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.key == "params.l" and info.value.file == str(path)
    assert "lines 4 and 6" in str(info.value)
    path.write_text(DUP.replace("  l: [256]\n", "") + "repeats: 3\n")
    with pytest.raises(SpecError, match="key 'repeats': given twice, at lines 6 and 7"):
        load_spec(path)
    path.write_text(DUP)
    one_error(*cli_in_process(capsys, "sweep", "expand", str(path))[::2], str(path),
              "key 'params.l'", "given twice, at lines 4 and 6")


def test_unique_key_loader_paths_merges_and_plain_yaml():
    import yaml

    from opatlas.yaml_io import DuplicateKeyError, UniqueKeyLoader

    with pytest.raises(DuplicateKeyError) as info:
        yaml.load("a:\n  - x: 1\n    x: 2\n", Loader=UniqueKeyLoader)
    assert info.value.key == "a.0.x" and info.value.lines == (2, 3)
    with pytest.raises(DuplicateKeyError, match=r"key '1\.0' is given twice \(first at line 1\)"):
        yaml.load("1: a\n1.0: b\n", Loader=UniqueKeyLoader)  # one key in a dict
    # a merge's keys may be overridden (YAML's intent); repeated aliases are not duplicates
    text = "base: &b {l: 1, b: 2}\nrun:\n  <<: *b\n  l: 3\nagain: *b\n"
    assert yaml.load(text, Loader=UniqueKeyLoader) == yaml.safe_load(text)


# 6: a custom op named like a built-in one ---------------------------------------------------
CLASH = '''
from opatlas.ops import Op, register_op

@register_op
class MyOp(Op):
    name = "{name}"
    params = ("n",)
'''


@pytest.mark.parametrize(("name", "what"), [("bmm", "a built-in op"),
                                             ("linear1", "a built-in alias (of linear)")])
def test_a_custom_op_named_like_a_builtin_is_refused(tmp_path, name, what):
    from opatlas.ops import get_op, load_ops_module

    mod = tmp_path / f"clash_{name}.py"
    mod.write_text(CLASH.format(name=name))
    said = f"--ops-module {mod} (at {mod}, line 4): op class MyOp is named '{name}', the " \
           f"name of {what}; give it another name"
    with pytest.raises(OpatlasError, match=re.escape(said)):
        load_ops_module(str(mod))
    op, _ = get_op(name)
    assert type(op).__module__.startswith("opatlas.ops.")  # the catalog's op, unchanged


def test_the_clash_is_seen_before_the_builtins_are_imported(tmp_path):
    """In a fresh process the user's module is imported before the catalog: its ``bmm`` used
    to be overwritten by the built-in one, silently."""
    mod = tmp_path / "my_ops.py"
    mod.write_text(CLASH.format(name="bmm"))
    spec = write_spec(tmp_path / "s.yml", {"op": "bmm", "params": {"n": [16]}, "repeats": 2})
    proc = run_cli("sweep", "expand", str(spec), "--ops-module", str(mod))
    one_error(proc.returncode, proc.stderr, "is named 'bmm', the name of a built-in op")


def test_a_custom_op_with_its_own_name_still_registers(tmp_path):
    from opatlas.ops import get_op, load_ops_module

    mod = tmp_path / "mine.py"
    mod.write_text(CLASH.format(name="predict_fit_fixes_op"))
    load_ops_module(str(mod))
    assert get_op("predict_fit_fixes_op")[0].params == ("n",)
