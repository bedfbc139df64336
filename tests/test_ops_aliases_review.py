"""Review: an alias's fixed parameters cannot be overridden by a spec; ``opatlas ops`` shows
what each alias fixes, every op's dtype and its default, user ops (--ops-module) and --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_in_process, one_error, write_spec

SHAPE = {"mp": [1], "b": [1], "l": [128], "dim": [256]}


def _spec(tmp_path: Path, name: str, **spec: object) -> str:
    return str(write_spec(tmp_path / f"{name}.yml", {"dtype": "fp32", **spec}))


def test_a_spec_giving_an_aliass_fixed_role_another_value_is_refused(tmp_path, capsys):
    path = _spec(tmp_path, "l1", op="linear1", params={"role": ["vocab"], **SHAPE, "vocab": [512]})
    code, _, err = cli_in_process(capsys, "sweep", "expand", path)
    line = one_error(code, err, path, "key 'params.role'", "'vocab'", "'qkv'", "linear_final")
    assert "alias of op 'linear'" in line
    store = tmp_path / "l1.duckdb"
    code, _, err = cli_in_process(capsys, "run", path, "--store", str(store), "--repeats", "2")
    one_error(code, err, "key 'params.role'")
    assert not store.exists()  # refused before anything is measured or filed


@pytest.mark.parametrize("where", ["fixed", "tied"])
def test_the_fixed_role_cannot_come_in_through_fixed_or_a_tied_axis(tmp_path, capsys, where):
    if where == "fixed":
        spec = {"op": "linear2", "params": SHAPE, "fixed": {"role": "ffn_up"}}
        key = "fixed.role"
    else:
        spec = {"op": "linear2", "params": {**SHAPE, "model": [{"role": "ffn_up", "ffn": 512}]}}
        key = "params.model"
    code, _, err = cli_in_process(capsys, "sweep", "expand", _spec(tmp_path, "l2", **spec))
    one_error(code, err, f"key '{key}'", "'ffn_up'", "role fixed to 'out'", "op 'linear3'")


def test_the_value_the_alias_fixes_is_allowed(tmp_path, capsys):
    path = _spec(tmp_path, "same", op="linear1", params={"role": ["qkv"], **SHAPE})
    code, out, err = cli_in_process(capsys, "sweep", "expand", path, "--json")
    assert code == 0, err
    assert json.loads(out)["valid"] == 1


def test_resolving_a_vector_that_contradicts_its_alias_is_invalid_not_measured():
    from opatlas.errors import InvalidShape
    from opatlas.ops.registry import resolved_params

    shape = {"mp": 1, "b": 1, "l": 128, "dim": 256}
    with pytest.raises(InvalidShape, match="role='qkv'; role='vocab' is another op"):
        resolved_params("linear1", {**shape, "role": "vocab"})
    assert resolved_params("linear1", {**shape, "role": "qkv"})[1]["role"] == "qkv"
    assert resolved_params("linear1", shape)[1]["role"] == "qkv"


def _catalog(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, dict]:
    code, out, err = cli_in_process(capsys, "ops", "--json", *args)
    assert code == 0, err
    return {e["op"]: e for e in json.loads(out)}


def test_ops_shows_what_an_alias_fixes_apart_from_its_defaults(capsys):
    cat = _catalog(capsys, "--aliases")
    assert cat["linear1"]["alias_of"] == "linear" and cat["linear1"]["fixed"] == {"role": "qkv"}
    assert "role" not in cat["linear1"]["defaults"]  # not overridable: not "optional"
    assert cat["linear"]["alias_of"] is None and cat["linear"]["defaults"]["role"] == "qkv"
    assert cat["firstStage_optimizer"]["fixed"] == {"stage": "first", "layout": "ett"}
    code, out, _ = cli_in_process(capsys, "ops", "--aliases")
    assert code == 0
    row = next(ln for ln in out.splitlines() if "│ linear2 " in ln)
    assert "linear (role=out)" in row and "role=out," not in row.split("linear (role=out)")[1]
    assert "alias of" in out


def test_ops_shows_every_ops_dtype_and_its_default(capsys):
    cat = _catalog(capsys)
    assert cat["linear"]["defaults"]["dtype"] == "fp32"
    assert cat["reshard"]["defaults"]["dtype"] == "bfloat16"  # its own default wins
    assert all("dtype" in e["defaults"] for e in cat.values())
    code, out, _ = cli_in_process(capsys, "ops")
    assert code == 0
    assert sum("dtype=" in ln for ln in out.splitlines()) == len(cat)


def test_ops_lists_the_ops_of_an_ops_module(tmp_path, capsys):
    mod = tmp_path / "my_review_ops.py"
    mod.write_text("from opatlas.ops import Op, register_op\n\n"
                   "@register_op\nclass ReviewScale(Op):\n    name = 'review_g_scale'\n"
                   "    params = ('n',)\n    defaults = {'k': 2}\n    description = 'mine'\n")
    cat = _catalog(capsys, "--ops-module", str(mod))
    assert cat["review_g_scale"] == {"op": "review_g_scale", "alias_of": None, "fixed": {},
                                     "params": ["n"], "defaults": {"k": 2, "dtype": "fp32"},
                                     "passes": ["fwd", "bwd"], "description": "mine"}
    code, _, err = cli_in_process(capsys, "ops", "--ops-module", str(tmp_path / "none.py"))
    one_error(code, err, "--ops-module", "no such file")


def test_a_spec_without_dtype_says_the_dtype_it_runs_at(tmp_path, capsys):
    path = write_spec(tmp_path / "nodtype.yml", {"op": "linear", "params": SHAPE})
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(path))
    assert code == 0
    assert f"opatlas: note: {path}: no dtype given: its vectors are fp32, the default" in err
    for given in ({"dtype": "bf16"}, {"fixed": {"dtype": "fp16"}}):
        other = write_spec(tmp_path / "given.yml", {"op": "linear", "params": SHAPE, **given})
        code, _, err = cli_in_process(capsys, "sweep", "expand", str(other))
        assert code == 0 and "note" not in err, err
    code, _, err = cli_in_process(capsys, "sweep", "expand", "demo-linear")  # opatlas's own
    assert code == 0 and "note" not in err, err


def test_an_ett_config_says_it_runs_at_fp16(capsys):
    from conftest import REPO

    path = REPO / "examples" / "specs" / "ett_flash_atten.yml"
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(path), "--json")
    assert code == 0
    assert "an estimate-train-time config has no dtype: its vectors are fp16" in err


def test_predict_names_what_an_alias_fixes_and_the_alias_of_another_value(capsys):
    code, _, err = cli_in_process(capsys, "predict", "linear2", "--shape",
                                  "mp=1,b=1,l=128,dim=256,role=ffn_up")
    line = one_error(code, err, "unknown role", "linear2 is linear with role='out' fixed")
    assert "linear3 (role='ffn_up')" in line and "linear_final (role='vocab')" in line


@pytest.mark.parametrize("shape", [[[1, 1, 64, 64]], ["1,1,64,64"]])
def test_a_files_reshard_spec_is_refused_with_the_way_to_its_built_in_sweep(tmp_path, capsys,
                                                                           shape):
    """The reshard's vectors come from its built-in sweep: a file's spec of it had died in
    pydantic's list noise, or with a KeyError traceback (fp32, the spec default, has no
    Tenstorrent datum size)."""
    path = write_spec(tmp_path / "r.yml", {
        "op": "reshard", "params": {"input_shape": shape, "input_core_grid": ["2x2"],
                                    "output_core_grid": ["1x1"],
                                    "input_shard_strategy": ["BLOCK"],
                                    "output_shard_strategy": ["BLOCK"]}})
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(path))
    one_error(code, err, str(path), "key 'op'", "'reshard'", "built-in spec",
              "opatlas run reshard --where")
