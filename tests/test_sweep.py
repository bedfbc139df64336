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


def test_tied_parameters_set_several_at_once():
    import pytest

    from opatlas.errors import SpecError

    spec = spec_from_mapping({
        "name": "tied", "op": "linear",
        "params": {"model": [{"dim": 4096, "ffn": 11008}, {"dim": 8192, "ffn": 28672}],
                   "mp": [1, 8], "b": [1], "l": [2048]},
        "constraints": ["ffn // mp >= 2048"]})
    vecs = expand(spec).vectors
    assert [(v.params["dim"], v.params["ffn"], v.params["mp"]) for v in vecs] == [
        (4096, 11008, 1), (8192, 28672, 1), (8192, 28672, 8)]  # 11008 // 8 < 2048: dropped
    assert all("model" not in v.params for v in vecs)  # the label sets, it is not a parameter
    assert vecs[0].id == vector_id("linear", {"dim": 4096, "ffn": 11008, "mp": 1, "b": 1,
                                              "l": 2048, "dtype": "fp32"})
    for bad, words in [
        ({"model": [{"dim": 1}, {"ffn": 2}]}, "must set the same parameters"),
        ({"model": [{"dim": 1}], "dim": [2]}, "set by both"),
        ({"model": [{"dim": 1}, {}]}, "sets nothing"),
    ]:
        with pytest.raises(SpecError, match=words):
            spec_from_mapping({"name": "x", "op": "linear",
                               "params": {**bad, "b": [1], "l": [1]}})


def test_llm_catalog_specs_cover_every_op_with_real_model_shapes():
    from opatlas.ops.batch import batch_counts
    from opatlas.sweep.builtin import builtin_names, builtin_spec
    from opatlas.sweep.llm_catalog import MODELS, llm_spec_names

    assert set(llm_spec_names()) <= set(builtin_names())
    # by hand: 2 dtypes × 6 models × 4 mp × 3 b × 2 l × 5 roles; flash: 4 seq lengths;
    # the norms: 5 distinct dims, no mp; adam: fp32, 4 mp × 3 layer counts × 3 stages
    counts = {"llm-linear": 1440, "llm-flash_attention": 576, "llm-rmsnorm": 60,
              "llm-rope": 240, "llm-cross_entropy": 96, "llm-adam_step": 216, "llm-moe": 48,
              "llm-attention_dropout": 2 * 4 * 4 * 3 * 2,  # 4 distinct head counts
              "llm-grad_accumulate": 2 * 5 * 2,
              "llm-bias_dropout_add": 2 * 5 * 3 * 2 * 2}  # 5 dims, with and without dropout
    for name in llm_spec_names():
        spec = builtin_spec(name)
        exp = expand(spec)
        assert exp.invalid == {}, name  # every model shape is valid for every layout
        if name in counts:
            assert exp.valid == counts[name], name
        frame = __import__("pandas").DataFrame([v.params for v in exp.vectors])
        moved = batch_counts(spec.op, frame).filter(like="bytes_")  # fillmask has no FLOPs
        assert len(moved.columns) and (moved.to_numpy() > 0).all(), name
    seventy_b = [v.params for v in expand(builtin_spec("llm-linear")).vectors
                 if v.params["dim"] == 8192]
    assert {(p["h"], p["kv_heads"], p["ffn"]) for p in seventy_b} == {(64, 8, 28672)}
    assert MODELS["llama-3-8b"]["kv_heads"] == 8 and MODELS["llama-2-7b"]["kv_heads"] == 32


def test_gpu_session_script_dry_run_on_cpu(tmp_path):
    """scripts/gpu_session.sh (what a GPU session runs) works end to end on the CPU backend,
    and a second call resumes instead of measuring again."""
    import os
    from pathlib import Path

    from opatlas.store import Store

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHON=sys.executable, BACKEND="cpu", STEPS="sweep", WHEELS="",
               SPECS="llm-rmsnorm", WHERE="b == 1 and l == 2048 and dim == 2048",
               OUT=str(tmp_path / "out"), WORK=str(tmp_path / "work"),
               STORE=str(tmp_path / "work" / "s.duckdb"))
    for _ in range(2):
        proc = subprocess.run(["bash", str(root / "scripts" / "gpu_session.sh")], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    assert "2 already in the store; ran 0" in proc.stdout
    # what comes back from a device: one packed file (the device tool brings back 8 at most)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu-session.tgz.aa"]
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    subprocess.run(["tar", "xzf", str(tmp_path / "out" / "gpu-session.tgz.aa"), "-C",
                    str(unpacked)], check=True)
    assert (unpacked / "sweep.txt").read_text().count("== llm-rmsnorm") == 2
    with Store(unpacked / "s.duckdb", read_only=True) as st:
        res = st.results()
    assert len(res) == 4 and set(res["dtype"]) == {"bf16", "fp16"}  # 2 vectors × fwd, bwd
    assert (res["status"] == "ok").all()


# -- streaming expansion (issue 15: the driver never holds the whole sweep) -------------------

# (streamed parts and selections against a whole-grid reference: test_sweep_review_s35.py)


def test_reshard_stream_has_the_old_ids():
    """Digests of (index, id) taken from the expansion before it streamed."""
    from opatlas.sweep.builtin import builtin_spec

    def digest(e):
        h = hashlib.sha256()
        for v in e.vectors:
            h.update(f"{v.index}:{v.id};".encode())
        return len(e.vectors), h.hexdigest()[:16]

    rs = builtin_spec("reshard")
    one = expand(rs, where="input_core_grid == '1x1' and output_core_grid in ('2x1', '1x2')")
    assert digest(one) == (2314, "9a417cdcb8da4741")
    assert one.summary()["invalid"] == {"Output tensor cannot be tiled": 560250,
                                        "Will not fit in L1": 413742, "downsampled": 16208,
                                        "ignore": 123504}
    assert digest(expand(rs, where="input_core_grid in ('2x2', '1x1') and output_core_grid == "
                                   "'1x2'", parts=3, part=2)) == (703, "d6d9f8443ca40686")


@given(n=st.integers(0, 5000), max_count=st.integers(1, 2000))
def test_thinning_one_at_a_time_is_the_every_other_rule(n, max_count):
    from opatlas.sweep.expand import SuiteThinner

    def reference(items):  # the seed's loop
        items = list(items)
        while len(items) > max_count:
            del items[::2]
        return items

    thinner = SuiteThinner({"s": n}, max_count)
    kept = [i for i in range(n) if thinner.keep("s")]
    assert kept == reference(range(n)) == downsample(list(range(n)), max_count)


def test_streaming_memory_is_bounded_by_the_batch():
    """60,000 vectors in batches of 5,000 peak at a few MB; the list would take ~25 MB."""
    import tracemalloc

    from opatlas.sweep import VectorStream

    spec = spec_from_mapping({"name": "n", "op": "noop", "params": {"i": list(range(60_000))}})
    stream = VectorStream(spec, batch_size=5000)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        count = sum(len(b.vectors) for b in stream)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert count == stream.valid == 60_000
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MB"


def test_a_bad_selection_fails_before_anything_is_expanded():
    import pytest

    from opatlas.errors import OpatlasError
    from opatlas.expressions import ExpressionError
    from opatlas.sweep import VectorStream

    spec = spec_from_mapping(SPEC)
    with pytest.raises(OpatlasError, match=r"--part must be in 1\.\.2, got 3"):
        VectorStream(spec, parts=2, part=3)
    with pytest.raises(ExpressionError, match="dim >"):
        VectorStream(spec, where="dim >")


def test_powers_in_expressions_are_computed_and_a_huge_one_refused_at_once():
    import pytest

    from opatlas.expressions import Expression, ExpressionError

    assert Expression.parse("dim ** 2 == 4096 and 2 ** -1 == 0.5")({"dim": 64}) is True
    assert Expression.parse("1 ** 10000000 == 1")({}) is True
    # refused before the power is taken (it would run for minutes)
    with pytest.raises(ExpressionError, match=r"4096 \*\* 10000000 is too large"):
        Expression.parse("dim ** 10000000 > 1")({"dim": 4096})


def test_a_where_that_divides_by_zero_says_how_many_points_it_could_not_judge():
    from opatlas.expressions import Expression
    from opatlas.sweep import expand

    spec = spec_from_mapping({"name": "z", "op": "linear", "params": {
        "role": ["qkv"], "mp": [1, 2, 4], "b": [1], "l": [128], "dim": [512, 1024]}})
    out = expand(spec, where="dim / (mp - 1) > 300")
    assert sorted((v.params["mp"], v.params["dim"]) for v in out.vectors) == \
        [(2, 512), (2, 1024), (4, 1024)]  # 1024/3 > 300, 512/3 is not
    assert out.invalid == {"--where 'dim / (mp - 1) > 300' divides by zero": 2}  # mp = 1
    assert Expression.parse("1 / x > 0")({"x": 0}) is False  # constraints: still just false


def test_an_expression_splits_into_its_top_level_and_parts():
    from opatlas.expressions import Expression

    e = Expression.parse("a > 1 and (b < 2 and c == 3) and (d or e)")
    assert [p.source for p in e.conjuncts()] == ["a > 1", "b < 2", "c == 3", "(d or e)"[1:-1]]
    assert [p.names for p in e.conjuncts()] == [{"a"}, {"b"}, {"c"}, {"d", "e"}]
    assert Expression.parse("a or b").conjuncts()[0].source == "a or b"
