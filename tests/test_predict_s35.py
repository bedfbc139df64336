"""``Predictor.predict`` and ``opatlas predict`` after the s35 review: the catalog's shape rules
checked on whole columns (large batches), the note on a device outside the catalog on warm
calls too, saved models of a user's op refused once its counts change, and a latency floor
under predictions for shapes below the data's smallest."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest

from conftest import cli_in_process, one_error, run_cli
from opatlas.errors import InvalidShape, OpatlasError
from opatlas.fit.data import UnknownDeviceWarning
from opatlas.ops.registry import get_op
from opatlas.predict import Predictor, check_valid
from opatlas.predict import predictor as predictor_mod
from opatlas.predict.predictor import OutOfRangeWarning, check_values, rows_breaking_rules
from opatlas.samples import bundled_dataset

A100_FP16_LEAST_US = 6.0  # the bundled data's least time on the A100 in fp16 (gelu fwd)
TINY = {"mp": [8], "b": [1], "l": [1], "dim": [128]}


@pytest.fixture(scope="module")
def cache():
    """The user cache the rest of the suite fills (indexes and bundled models): its models are
    the ones every test of the bundled data shares, fitted once per run."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("opatlas"))


def _scalar_bad(op: str, table: dict[str, np.ndarray]) -> list[int]:
    """The rows the catalog's rules reject, one row at a time (the rule as check_valid has
    it)."""
    bad = []
    for i in range(len(next(iter(table.values())))):
        try:
            check_valid(op, {k: v[i].item() if hasattr(v[i], "item") else v[i]
                             for k, v in table.items()})
        except OpatlasError:
            bad.append(i)
    return bad


def _random_shapes(op: str, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` shapes of ``op`` over small sizes (many break ``dim % mp`` and the like); a
    parameter whose default is 0 ("not given") takes 0 too, a fractional one fractions."""
    rng = np.random.default_rng(seed)
    cat, fixed = get_op(op)
    out: dict[str, np.ndarray] = {}
    for p in (*cat.params, *cat.defaults):
        default = cat.defaults.get(p)
        if p in fixed or isinstance(default, str):
            continue
        if isinstance(default, float):
            out[p] = rng.choice([0.0, 0.1, 0.5, 1.0, 1.5], n)
        else:
            out[p] = rng.choice([0] * (default == 0) + [1, 2, 3, 4, 6, 8, 12, 64, 96], n)
    return out


@pytest.mark.parametrize("op", ["linear1", "linear4", "flash_attention", "baddbmm", "softmax",
                                "attention_dropout", "grad_accumulate", "moe"])
def test_the_rules_on_columns_reject_exactly_the_rows_the_scalar_rule_does(op):
    table = _random_shapes(op, 300)
    bad = _scalar_bad(op, table)
    assert bad and len(bad) < 300  # both kinds present
    assert rows_breaking_rules(op, table, np.arange(300)).tolist() == bad


def test_the_rules_on_columns_read_a_named_column_per_value():
    """linear's role as a column of text: ``p["role"] in LINEAR_ROLES`` runs per role."""
    table = _random_shapes("linear", 200, seed=1)
    table["role"] = np.random.default_rng(1).choice(
        np.array(["qkv", "out", "vocab", "nope"], dtype=object), 200)
    bad = _scalar_bad("linear", table)
    assert any(table["role"][i] == "nope" for i in bad)
    assert rows_breaking_rules("linear", table, np.arange(200)).tolist() == bad


def test_rows_the_columns_cannot_judge_are_left_to_the_scalar_rule():
    """A NaN (the key left out: the op's default) or a huge value is checked row by row; an op
    with a test of its own (reshard) keeps every row; one outside the catalog none."""
    table = {"mp": np.array([1.0, 2, np.nan, 4]), "b": np.array([1.0, 1, 1, 1]),
             "l": np.array([8.0, 8, 8, 8]), "dim": np.array([64.0, 64, 63, 2.0**40])}
    assert rows_breaking_rules("linear1", table, np.arange(4)).tolist() == [2, 3]
    assert rows_breaking_rules("reshard", {"x": np.arange(3)}, np.arange(3)).tolist() == [0, 1, 2]
    assert rows_breaking_rules("no_such_op", {"x": np.arange(3)}, np.arange(3)).size == 0


def _large_batch(n: int, bad_row: int) -> dict[str, np.ndarray]:
    """``n`` distinct valid linear1 shapes; at ``bad_row`` dim=100 with mp=8 (dim % mp)."""
    i = np.arange(n)
    table = {"mp": np.full(n, 8), "b": 1 + i % 8, "l": 128 * (1 + (i // 8) % 64),
             "dim": 128 * (1 + i // 512)}
    table["dim"][bad_row] = 100
    return table


def test_a_bad_row_of_a_large_batch_is_named_as_the_scalar_check_names_it(monkeypatch):
    n, k = 100_000, 73_210
    table = _large_batch(n, k)
    calls = []
    real = predictor_mod.check_valid
    monkeypatch.setattr(predictor_mod, "check_valid",
                        lambda op, row: calls.append(row) or real(op, row))
    with pytest.raises(InvalidShape) as vectorised:
        check_values("linear1", table, np.arange(n))
    assert len(calls) == 1  # the rules ran on the columns; only the culprit row by row
    monkeypatch.setattr(predictor_mod, "VECTOR_RULE_ROWS", 10**18)  # every row by itself
    with pytest.raises(InvalidShape) as scalar:
        check_values("linear1", table, np.arange(n))
    assert str(vectorised.value) == str(scalar.value) == (
        f"row {k} of {n}: shape mp=8, b={table['b'][k]}, l={table['l'][k]}, dim=100 is not "
        f"valid for op 'linear1': dim % mp != 0")


def test_a_bad_number_in_a_large_batch_names_row_parameter_and_value():
    table = _large_batch(50_000, 0)
    table["dim"][0] = 128
    table["b"] = table["b"].astype(float)
    table["b"][31_337] = -2.5
    with pytest.raises(InvalidShape, match=r"^op 'linear1': row 31337 of 50000: b=-2.5: b must "
                                           r"be a finite number > 0"):
        check_values("linear1", table)


def test_predict_refuses_a_large_batch_with_a_bad_row(cache):
    pred = Predictor(cache_dir=cache / "models")
    table = _large_batch(20_000, 12_345)
    with pytest.raises(InvalidShape, match=r"^row 12345 of 20000: shape .*dim % mp != 0$"):
        pred.predict("linear1", table)


# -- a device outside the catalog ------------------------------------------------------------

def _own_gpu(root: Path, name: str) -> Path:
    """A folder of the bundled RMSlayernorm samples filed under GPU ``name``."""
    folder = root / name
    folder.mkdir()
    shutil.copy(bundled_dataset() / "operator" / "NVIDIAA100-SXM4-80GB_RMSlayernorm_fp16.csv",
                folder / f"{name}_RMSlayernorm_fp16.csv")
    return folder


def _notes(err: str, name: str) -> list[str]:
    return [ln for ln in err.splitlines() if f"device '{name}' is not in the catalog" in ln]


def test_a_warm_predict_says_the_device_is_outside_the_catalog(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    name = "MyGPU-S35a"
    args = ("predict", "rmsnorm", "--data", str(_own_gpu(tmp_path, name)), "--device", name,
            "--shape", "b=2,l=1024,dim=4096")
    code, _, cold = cli_in_process(capsys, *args)  # fits: the data describes the device
    assert code == 0, cold
    assert "fitting RMSlayernorm" in cold
    note = _notes(cold, name)
    assert len(note) == 1 and "best of 702 samples" in note[0], cold
    code, _, warm = cli_in_process(capsys, *args)  # the cached models, loaded: the same line
    assert code == 0 and "fitting" not in warm, warm
    assert _notes(warm, name) == note, warm
    again = run_cli(*args)  # and in every process (the cache dir is this test's: the env)
    assert again.returncode == 0 and "fitting" not in again.stderr, again.stderr
    assert _notes(again.stderr, name) == note, again.stderr


def test_saved_models_of_a_device_outside_the_catalog_say_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    name, models = "MyGPU-S35b", tmp_path / "models"
    fitting = Predictor(device=name, data=_own_gpu(tmp_path, name), cache_dir=models)
    with pytest.warns(UnknownDeviceWarning) as said_fitting:
        fitting.model("RMSlayernorm", "fwd")
    shape = {"b": [2], "l": [1024], "dim": [4096]}
    for _ in range(2):
        with pytest.warns(UnknownDeviceWarning) as said:
            Predictor(device=name, models=models).predict("rmsnorm", shape)
        assert [str(w.message) for w in said] == [str(said_fitting[0].message)]


# -- saved models of a user's op whose counts change ------------------------------------------

OPS = '''
from opatlas.ops import Op, register_op

@register_op
class ScaleS35(Op):
    name = "scale_s35"
    params = ("n",)
    defaults = {"k": 3}
    def flops(self, p): return {"fwd": FLOPS * p["n"] * p["k"], "bwd": 2 * p["n"] * p["k"]}
    def min_bytes(self, p): return {"fwd": 8 * p["n"] * p["k"], "bwd": 12 * p["n"] * p["k"]}
'''


def _ops_module(path: Path, flops: int = 1, comment: str = "") -> Path:
    path.write_text(OPS.replace("FLOPS", str(flops)) + comment)
    return path


@pytest.fixture(scope="module")
def saved_user_models(tmp_path_factory) -> tuple[Path, Path]:
    """(a folder of samples of a user's op on the A100, fp32; the models fit --out saved)."""
    root = tmp_path_factory.mktemp("s35_user_op")
    data = root / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    lines = ["n,k,F_dur(us),B_dur(us)"]
    for n in (2**i for i in range(14, 28)):
        for k in (1, 2, 3, 4):
            t = 5 + n * k * 8 / 1.5e12 * 1e6
            lines.append(f"{n},{k},{t * (1 + 0.02 * rng.standard_normal()):.3f},{2 * t:.3f}")
    (data / "NVIDIAA100-SXM4-80GB_scale_s35_fp32.csv").write_text("\n".join(lines) + "\n")
    models = root / "models"
    run_cli("fit", "--data", str(data), "--ops-module", str(_ops_module(root / "ops.py")),
            "--out", str(models), check=True)
    return data, models


def _predict_saved(models: Path, module: Path, *extra: str):
    return run_cli("predict", "scale_s35", "--models", str(models), "--ops-module", str(module),
                   "--dtype", "fp32", "--shape", "n=1000000,k=2", "--json", *extra)


def test_saved_models_are_refused_once_the_ops_counts_change(saved_user_models, tmp_path):
    _, models = saved_user_models
    proc = _predict_saved(models, _ops_module(tmp_path / "ops.py", flops=1000))
    line = one_error(proc.returncode, proc.stderr, "counts of op 'scale_s35' changed since",
                     "model was saved", f"opatlas fit --data DATA --ops-module FILE --out "
                                        f"{models}")
    assert "roofline_us at n=" in line


def test_saved_models_load_after_an_edit_that_keeps_the_counts(saved_user_models, tmp_path):
    _, models = saved_user_models
    same = _predict_saved(models, _ops_module(tmp_path / "ops.py"))
    assert same.returncode == 0, same.stderr
    edited = _predict_saved(models, _ops_module(tmp_path / "ops2.py", comment="# edited\n"))
    assert edited.returncode == 0, edited.stderr
    assert json.loads(edited.stdout)["us"] == json.loads(same.stdout)["us"]
    assert "counts" not in edited.stderr


def test_models_saved_without_the_counts_load_with_a_note(saved_user_models, tmp_path):
    """Models saved before the counts were kept beside them: a changed module is said (the
    counts cannot be compared); --strict refuses them."""
    _, saved = saved_user_models
    models = tmp_path / "models"
    shutil.copytree(saved, models)
    for path in models.rglob("*.joblib"):
        doc = joblib.load(path)
        del doc["meta"]["probe"]
        joblib.dump(doc, path)
    changed = _ops_module(tmp_path / "ops.py", flops=1000)
    proc = _predict_saved(models, changed)
    assert proc.returncode == 0, proc.stderr
    assert "scale_s35 fwd was saved without the counts it was fitted on, and the module " \
           "defining scale_s35 changed since" in proc.stderr
    strict = _predict_saved(models, changed, "--strict")
    one_error(strict.returncode, strict.stderr, "--strict refuses a model it cannot check")


# -- the latency floor ------------------------------------------------------------------------

def test_a_tiny_shape_is_floored_at_the_datas_least_time_and_said_once(cache):
    pred = Predictor(cache_dir=cache / "models")
    assert pred.index.floor_us("A100-SXM4-80GB", "fp16") == A100_FP16_LEAST_US
    with pytest.warns(OutOfRangeWarning, match=r"linear1: the shape predicted under 6 µs "
                                               r"\(fwd\), the least time any op took") as said:
        fwd = pred.predict("linear1", TINY)
    assert len(said) == 1 and fwd.tolist() == [A100_FP16_LEAST_US]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per op
        assert pred.predict("linear1", TINY, pass_="bwd").tolist() == [A100_FP16_LEAST_US]
        usual = {"mp": [1], "b": [4], "l": [2048], "dim": [4096]}
        model = pred.model("linear1", "fwd")
        assert pred.predict("linear1", usual).tolist() == model.predict(usual).tolist()
        assert model.predict(usual)[0] > 10 * A100_FP16_LEAST_US


def test_predict_prints_the_floor_for_a_tiny_shape(cache, capsys):
    code, out, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                    "mp=8,b=1,l=1,dim=128", "--json")
    assert code == 0, err
    assert json.loads(out)["us"] == {"fwd": A100_FP16_LEAST_US, "bwd": A100_FP16_LEAST_US}
    assert "floored there" in err


def test_saved_models_keep_the_floor(cache, tmp_path):
    models = tmp_path / "models"
    Predictor(cache_dir=models).model("linear1", "fwd")
    with pytest.warns(OutOfRangeWarning, match="floored"):
        got = Predictor(models=models).predict("linear1", TINY)
    assert got.tolist() == [A100_FP16_LEAST_US]


def test_a_parameter_the_data_left_at_its_default_is_said_when_set_otherwise(cache, capsys):
    """The bundled linear_final samples leave vocab out (the catalog's 50,257): a prediction
    at another vocab is an extrapolation the model never saw, said (refused by --strict)."""
    args = ("predict", "linear_final", "--shape", "mp=1,b=2,l=2048,dim=4096")
    code, _, err = cli_in_process(capsys, *args, "--shape", "vocab=32000")
    assert code == 0, err
    assert ("vocab=32,000 (not in the data: measured only at the catalog's default 50,257)"
            in err)
    code, _, err = cli_in_process(capsys, *args, "--shape", "vocab=50257")
    assert code == 0 and "not in the data" not in err
    code, _, err = cli_in_process(capsys, *args, "--shape", "vocab=32000", "--strict")
    one_error(code, err, "vocab=32,000", "--strict refuses to extrapolate")
