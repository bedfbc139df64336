"""``opatlas fit`` and ``opatlas predict`` with ``--ops-module``: a user's op's defaults fill the
parameters its rows (and a ``--shape``) leave out, as for ``sweep`` and ``run``; without the
module such an op is refused in one line saying to pass it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import one_error, run_cli, write_spec

# k has a default: one spec gives it, the other leaves it out (k=3 measured: 10 shapes, 20 rows)
MODULE = '''
from opatlas.ops import Op, register_op

@register_op
class ScaleK(Op):
    name = "scale_k"
    params = ("n",)
    defaults = {"k": 3}
    def flops(self, p): return {"fwd": FLOPS, "bwd": 2 * FLOPS}
    def min_bytes(self, p): return {"fwd": 8 * p["n"] * p["k"], "bwd": 12 * p["n"] * p["k"]}
    def build(self, p, device):
        import torch
        return torch.randn(p["n"], p["k"], device=device, requires_grad=True)
    def forward(self, x): return 2 * x
'''
ARRAYS = 'p["n"] * p["k"]'  # counts that work on whole columns of shapes at once
NO_COUNTS = 'p["n"] * p["width"]'  # a parameter the op does not have: no counts at all
WITH_K = {"n": [64, 128, 256, 512, 1024, 2048, 4096, 8192], "k": [1, 2, 3]}
WITHOUT_K = {"n": [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]}
ROWS = 8 * 3 + 10  # per pass


def _module(path: Path, flops: str = ARRAYS) -> Path:
    path.write_text(MODULE.replace("FLOPS", flops))
    return path


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, Path, str]:
    """(the ops module, a store of its op run on the cpu, the device the rows name)."""
    from opatlas.store import Store

    root = tmp_path_factory.mktemp("ops_module")
    mod, store = _module(root / "my_ops.py"), root / "s.duckdb"
    for name, params in (("with_k", WITH_K), ("without_k", WITHOUT_K)):
        spec = write_spec(root / f"{name}.yml", {"op": "scale_k", "params": params,
                                                 "repeats": 2, "warmup": 0})
        run_cli("run", str(spec), "--ops-module", str(mod), "--backend", "cpu", "--store",
                str(store), check=True)
    with Store(store, read_only=True) as st:
        device = str(st.results(expand_params=False)["device"].iloc[0])
    return mod, store, device


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A cache of indexes and models of this test's own: nothing fitted elsewhere is reused."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _predict(store: Path, device: str, *args: str):
    return run_cli("predict", "scale_k", "--data", str(store), "--device", device, "--dtype",
                   "fp32", *args)


def test_fit_fills_a_user_ops_default_from_its_module(measured):
    mod, store, _ = measured
    proc = run_cli("fit", "--data", str(store), "--ops-module", str(mod), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert sorted(r["pass"] for r in rows) == ["bwd", "fwd"]
    for r in rows:  # every row fitted or tested: those leaving k out at k=3, the counts known
        assert (r["op"], r["recipe"], r["n_train"] + r["n_test"]) == ("scale_k", "hybrid", ROWS)
    assert "20 row(s) of the data leave out k, taken as the catalog's default k=3" in proc.stderr


def test_fit_without_the_module_refuses_naming_the_op_and_the_option(measured):
    _, store, _ = measured
    proc = run_cli("fit", "--data", str(store))
    one_error(proc.returncode, proc.stderr, "op 'scale_k'", "not in the catalog",
              "pass --ops-module")


def test_predict_fills_a_user_ops_default_from_its_module(measured):
    mod, store, device = measured
    proc = _predict(store, device, "--shape", "n=1000", "--ops-module", str(mod), "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["defaults"] == {"k": 3} and got["shape"] == {"n": 1000, "k": 3}
    assert all(math.isfinite(v) and v > 0 for v in got["us"].values()), got
    given = _predict(store, device, "--shape", "n=1000,k=3", "--ops-module", str(mod), "--json")
    # the default is k=3 itself (the first run's fitted model, the second's compiled one)
    assert json.loads(given.stdout)["us"] == pytest.approx(got["us"], rel=1e-9)


@pytest.mark.parametrize("shape", ["n=1000", "n=1000,k=3"])
def test_predict_without_the_module_names_the_op_and_the_option(measured, shape):
    _, store, device = measured
    proc = _predict(store, device, "--shape", shape)
    one_error(proc.returncode, proc.stderr, "op 'scale_k'", "not in the catalog",
              "pass --ops-module")


def test_the_index_built_without_the_module_is_not_reused_with_it(measured):
    """Without the module the rows leaving k out are dropped (no default known): the index
    that says so must be rebuilt once the module gives k=3, or n=32,768 (measured only by the
    spec leaving k out) reads as outside the data."""
    mod, store, device = measured
    assert _predict(store, device, "--shape", "n=32768").returncode == 2
    proc = _predict(store, device, "--shape", "n=32768", "--ops-module", str(mod), "--strict")
    assert proc.returncode == 0, proc.stderr
    assert "20 row(s) of the data leave out k, taken as the catalog's default k=3" in proc.stderr


def test_saved_models_of_a_user_op_need_its_module(measured, tmp_path):
    mod, store, device = measured
    models = tmp_path / "models"
    run_cli("fit", "--data", str(store), "--ops-module", str(mod), "--out", str(models),
            check=True)
    args = ("predict", "scale_k", "--models", str(models), "--device", device, "--dtype",
            "fp32", "--shape", "n=1000,k=3")
    proc = run_cli(*args)  # the hybrid model's roofline needs the op's counts
    one_error(proc.returncode, proc.stderr, "op 'scale_k'", f"the models under {models}",
              "pass --ops-module")
    ok = run_cli(*args, "--ops-module", str(mod), "--json", check=True)
    assert all(math.isfinite(v) and v > 0 for v in json.loads(ok.stdout)["us"].values())


def test_a_changed_module_refits_its_ops_cached_models(measured, tmp_path):
    """A model cached while the op's counts failed (fitted without them: gbm) is not reused
    once the module computes them (hybrid)."""
    _, store, device = measured
    mod = _module(tmp_path / "changing_ops.py", NO_COUNTS)
    args = ("--shape", "n=100000,k=3", "--ops-module", str(mod))  # beyond the data: says why
    first = _predict(store, device, *args)
    assert first.returncode == 0 and "the gbm recipe's trees" in first.stderr, first.stderr
    # the fallback from the hybrid recipe is said, with the formula's error
    assert "could not be counted for every row (KeyError: 'width')" in first.stderr
    _module(mod)
    again = _predict(store, device, *args)
    assert again.returncode == 0 and "the hybrid model scales" in again.stderr, again.stderr
