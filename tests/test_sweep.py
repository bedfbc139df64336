"""Sweep expansion: ids, order, parts, downsampling, selection."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from opatlas.spec import load_spec, spec_from_mapping
from opatlas.sweep import downsample, expand, vector_id

SPEC = {"name": "t", "op": "linear",
        "params": {"mp": [1, 2], "b": [1, 2, 4], "l": [128, 256], "dim": [256, 384, 512]},
        "constraints": ["dim % (mp * 128) == 0"]}


def test_vector_id_is_sha224_of_canonical_sorted_json():
    params = {"mp": 2, "b": 1, "dim": 512, "l": 128, "dtype": "fp32"}
    expected = hashlib.sha224(
        b'{"b":1,"dim":512,"dtype":"fp32","l":128,"mp":2,"op":"linear"}').hexdigest()
    assert vector_id("linear", params) == expected
    assert vector_id("linear", dict(reversed(list(params.items())))) == expected


def test_ids_and_order_are_stable_across_processes():
    code = ("import json; from opatlas.spec import spec_from_mapping; from opatlas.sweep import expand;"
            f"print(json.dumps([v.id for v in expand(spec_from_mapping({SPEC!r})).vectors]))")
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                      text=True, check=True).stdout) for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0] == [v.id for v in expand(spec_from_mapping(SPEC)).vectors]


def test_odometer_order_last_parameter_fastest():
    vecs = expand(spec_from_mapping({"op": "layernorm", "params": {
        "b": [1, 2], "l": [1], "dim": [8, 16, 32]}})).vectors
    assert [(v.params["b"], v.params["dim"]) for v in vecs] == [
        (1, 8), (1, 16), (1, 32), (2, 8), (2, 16), (2, 32)]


@given(parts=st.integers(1, 7))
def test_parts_partition_the_set_exactly(parts):
    spec = spec_from_mapping(SPEC)
    whole = expand(spec)
    pieces = [expand(spec, parts=parts, part=k) for k in range(1, parts + 1)]
    ids = [v.id for p in pieces for v in p.vectors]
    assert sorted(ids) == sorted(v.id for v in whole.vectors)
    assert len(ids) == len(set(ids))
    assert sum(p.total for p in pieces) == whole.total
    for k, p in enumerate(pieces, start=1):
        assert all(v.index % parts == k - 1 for v in p.vectors)


def test_downsample_is_the_reshard_every_other_rule():
    assert downsample(list(range(10)), 10) == list(range(10))
    assert downsample(list(range(10)), 9) == [1, 3, 5, 7, 9]  # del v[::2] keeps odd positions
    assert downsample(list(range(10)), 4) == [3, 7]           # 10 -> 5 -> 2
    assert downsample(list(range(3201)), 1600) == list(range(1, 3201, 2))  # 3201 -> 1600
    assert len(downsample(list(range(3202)), 1600)) == 800  # 3202 -> 1601 -> 800


def test_downsampling_applies_per_suite():
    spec = spec_from_mapping({"op": "layernorm", "params": {
        "b": [1, 2], "l": list(range(1, 11)), "dim": [8]}, "suite_by": ["b"],
        "max_per_suite": 4})
    r = expand(spec)
    assert [v.params["l"] for v in r.vectors if v.params["b"] == 1] == [4, 8]
    assert [v.params["l"] for v in r.vectors if v.params["b"] == 2] == [4, 8]
    assert r.summary()["invalid"] == {"downsampled": 16}


def test_where_selects_a_subset(data_dir):
    spec = load_spec(data_dir / "ett_linear1.yml")
    r = expand(spec, where="dim >= 4096 and mp == 2")
    assert r.summary()["valid"] == 3 * 9 * 9  # b x l x dim in 4096..8192
    assert all(v.params["mp"] == 2 and v.params["dim"] >= 4096 for v in r.vectors)
