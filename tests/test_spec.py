"""Specs: ranges, both YAML dialects, golden counts, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli, write_spec
from opatlas.errors import SpecError
from opatlas.spec import ParamRange, load_spec, resolve_spec, spec_from_mapping
from opatlas.sweep import expand


def test_mul_and_add_ranges_are_inclusive():
    assert ParamRange(start=1, step=2, end=16, mode="mul").values() == [1, 2, 4, 8, 16]
    assert ParamRange(start=16, step=8, end=80).values() == [16, 24, 32, 40, 48, 56, 64, 72, 80]
    assert ParamRange(start=1024, step=512, end=5120).values()[-1] == 5120
    assert ParamRange(start=1, step=3, end=8, mode="mul").values() == [1, 3]
    assert ParamRange(start=0.5, step=0.25, end=1.0).values() == [0.5, 0.75, 1.0]


def test_ett_flash_atten_config_loads_unchanged_and_expands_to_upstream_counts(data_dir):
    spec = load_spec(data_dir / "ett_flash_atten.yml")
    assert spec.source == "ett"
    assert [n for n, _ in spec.axes()] == ["mp", "b", "h", "l", "dim"]
    assert spec.repeats == 10 and spec.warmup == 4  # active; wait + warmup
    # upstream's generator: 5 (mp) x 2 (b) x 9 (h) x 9 (l) x 13 (dim) = 10,530 shapes
    assert spec.grid_size() == 10_530
    result = expand(spec)
    # Hand count of the divisibility rules h % mp == 0 and dim % h == 0 (dim = 512k, k=4..16):
    # per h: (#mp | h, #dim with h | dim) = 16:(5,13) 24:(4,4) 32:(5,13) 40:(4,3) 48:(5,4)
    # 56:(4,2) 64:(5,13) 72:(4,1) 80:(5,3) -> sum of products 270; x 2 (b) x 9 (l) = 4,860.
    assert result.summary() == {
        "total": 10_530, "valid": 4_860,
        "invalid": {"dim % h != 0": 4_734, "h % mp != 0": 936},
    }


def test_ett_linear_config_matches_shipped_csv_row_count(data_dir):
    # The upstream linear CSVs have 1,755 rows: 5 x 3 x 9 x 13, all valid.
    result = expand(load_spec(data_dir / "ett_linear1.yml"))
    assert result.summary() == {"total": 1755, "valid": 1755, "invalid": {}}
    assert all(v.params.get("role") is None for v in result.vectors)  # alias fixes the role


def test_spec_constraint_expression_counts_reason(tmp_path):
    spec = write_spec(tmp_path / "s.yml", {
        "op": "linear", "params": {"mp": [1, 2, 3], "b": [1], "l": [8], "dim": [6, 8]},
        "constraints": ["dim % mp == 0"]})
    r = expand(load_spec(spec))
    # (mp, dim) pairs failing dim % mp: (3, 8) only
    assert r.summary() == {"total": 6, "valid": 5, "invalid": {"violates: dim % mp == 0": 1}}


def test_builtin_demo_specs_resolve_by_name():
    assert resolve_spec("demo-linear").op == "linear"


BAD_SPECS = [
    ({"params": {"b": [1]}}, "op", None),
    ({"op": "linear", "params": {"b": "x", "l": [1], "dim": [2]}, "repeats": "many"},
     "repeats", "many"),
    ({"op": "nosuchop", "params": {"b": [1]}}, "op", "nosuchop"),
    ({"op": "linear", "params": {"b": [], "l": [1], "dim": [2]}}, "params", None),
    ({"op": "linear", "params": {"b": {"start": 4, "step": 1, "end": 2}, "l": [1], "dim": [2]}},
     "params.b", None),
    ({"op": "linear", "params": {"b": {"start": 1, "step": 0, "end": 4}, "l": [1], "dim": [2]}},
     "params.b", None),
    ({"op": "linear", "params": {"b": {"start": 1, "step": 1, "end": 4, "mode": "mul"},
                                 "l": [1], "dim": [2]}}, "params.b", None),
    ({"op": "linear", "params": {"b": [1], "l": [1], "dim": [2]}, "constraints": ["dim %% 2"]},
     "constraints", "dim %% 2"),
    ({"op": "linear", "params": {"b": [1], "l": [1]}}, "params", None),
]


@pytest.mark.parametrize(("spec", "key", "value"), BAD_SPECS)
def test_bad_spec_is_one_clear_error_naming_file_and_key(tmp_path, spec, key, value):
    path = write_spec(tmp_path / "bad.yml", spec)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert (str(path) in msg and f"'{key.split('.')[0]}" in msg) or key in msg
    if value is not None:
        assert repr(value) in msg


def test_bad_spec_on_the_cli_exits_2_without_traceback_and_writes_nothing(tmp_path):
    path = write_spec(tmp_path / "bad.yml", {"op": "linear", "params": {
        "b": {"start": 1, "step": -2, "end": 8}, "l": [1], "dim": [2]}})
    store = tmp_path / "s.duckdb"
    for args in (["sweep", "expand", str(path), "--json"], ["run", str(path), "--store", str(store)]):
        proc = run_cli(*args)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr + proc.stdout
        assert str(path) in proc.stderr and "params.b" in proc.stderr and "step" in proc.stderr
    assert not store.exists()


def test_unparseable_yaml_names_line(tmp_path):
    p = tmp_path / "y.yml"
    p.write_text("op: linear\nparams: {b: [1, 2\n")
    with pytest.raises(SpecError, match=r"not valid YAML at line \d+"):
        load_spec(p)


def test_ett_config_with_mismatched_lengths_is_a_clear_error(tmp_path, data_dir):
    # upstream's moe.yml has 7 starts but 5 operators and crashes with IndexError
    data = yaml.safe_load((data_dir / "ett_flash_atten.yml").read_text())
    data["operators"] = data["operators"][:3]
    with pytest.raises(SpecError, match="operators"):
        spec_from_mapping(data, file="moe.yml")


def test_a_bad_column_range_in_an_ett_config_is_named_as_the_file_writes_it():
    ett = {"kernel_name": "linear1", "columns_name": ["mp", "b", "l", "dim"],
           "first_n_column": 4, "starts": [1, 2, 1024, 2048], "steps": [2, 2, 512, 512],
           "ends": [4, 4, 2048, 3072], "operators": ["mul", "mul", "add", "add"]}
    with pytest.raises(SpecError) as exc:
        spec_from_mapping({**ett, "operators": ["mul", "mul", "plus", "add"]}, file="l.yml")
    assert (exc.value.key, exc.value.value) == ("operators[2]", "plus")
    assert "column l" in str(exc.value) and "'add' or 'mul'" in str(exc.value)
    with pytest.raises(SpecError) as exc:
        spec_from_mapping({**ett, "steps": [2, 0, 512, 512]}, file="l.yml")
    assert (exc.value.key, exc.value.value) == ("steps[1]", 0)
    with pytest.raises(SpecError) as exc:
        spec_from_mapping({**ett, "ends": [4, 4, 512, 3072]}, file="l.yml")
    assert (exc.value.key, exc.value.value) == ("starts[2], ends[2]", [1024, 512])


_scalars = st.one_of(st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=5),
                     st.none(), st.booleans())
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["start", "step", "end", "mode", "operator", "x"]), inner,
                    max_size=4)), max_leaves=8)
_specs = st.dictionaries(
    st.sampled_from(["op", "params", "constraints", "repeats", "warmup", "suite_by",
                     "max_per_suite", "dtype", "name", "kernel_name", "starts", "steps", "ends",
                     "operators", "first_n_column", "columns_name", "bogus"]),
    st.one_of(_values, st.just("linear"), st.dictionaries(
        st.sampled_from(["b", "l", "dim", "mp", "1x"]), _values, max_size=4)),
    max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_specs)
def test_generated_bad_specs_never_raise_anything_but_spec_error(tmp_path, data):
    path = tmp_path / "h.yml"
    path.write_text(yaml.safe_dump(data))
    try:
        spec = load_spec(path)
    except SpecError as exc:
        assert str(path) in str(exc)
        return
    if spec.grid_size() <= 10_000:
        expand(spec)


def test_cli_json_counts(tmp_path, data_dir):
    proc = run_cli("sweep", "expand", str(data_dir / "ett_flash_atten.yml"), "--json",
                   "--where", "dim >= 8192 and mp == 2", check=True)
    out = json.loads(proc.stdout)
    # mp=2: h in {16,...,80} all even -> 9 h values; dim=8192 divisible by h for 16,32,64 only
    assert out == {"total": 9 * 2 * 9, "valid": 3 * 2 * 9, "invalid": {"dim % h != 0": 6 * 2 * 9}}


def test_cli_writes_vectors_json_and_parquet(tmp_path):
    import pandas as pd

    spec = write_spec(tmp_path / "s.yml", {"op": "layernorm", "params": {"b": [1, 2], "l": [4],
                                                                         "dim": [8, 16]}})
    run_cli("sweep", "expand", str(spec), "--out", str(tmp_path / "v.json"), check=True)
    run_cli("sweep", "expand", str(spec), "--out", str(tmp_path / "v.parquet"), check=True)
    js = json.loads((tmp_path / "v.json").read_text())
    pq = pd.read_parquet(tmp_path / "v.parquet")
    assert len(js) == len(pq) == 4
    assert [r["id"] for r in js] == list(pq["id"])
    assert {"op", "b", "l", "dim", "dtype"} <= set(pq.columns)


def test_spec_path_errors_are_clear(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        resolve_spec(str(Path(tmp_path) / "missing.yml"))
