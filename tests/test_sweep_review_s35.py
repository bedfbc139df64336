"""Sweeps as a new user meets them (review s35): parts and selections of a downsampled sweep,
a parameter given twice, the catalog's 0 defaults, a spec with no valid vector, and a spec
with several problems."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import cli_in_process, one_error, write_spec
from opatlas.errors import SpecError
from opatlas.spec import load_spec, spec_from_mapping
from opatlas.sweep import VectorStream, expand

SU = {"name": "su", "op": "linear", "suite_by": ["role"], "max_per_suite": 5,
      "params": {"role": ["qkv", "out"], "b": [1, 2, 3, 4], "l": [128, 256], "dim": [512]}}


def _ids(spec, **kw) -> list[str]:
    return [v.id for v in expand(spec, **kw).vectors]


# -- 1. --parts and --where take from the downsampled sweep ----------------------------------

def test_the_parts_of_a_downsampled_sweep_are_the_whole_sweep():
    spec = spec_from_mapping(SU)
    whole = expand(spec)
    assert whole.summary() == {"total": 16, "valid": 8, "invalid": {"downsampled": 8}}
    assert {v.params["l"] for v in whole.vectors} == {256}  # every other: the l=256 ones
    for parts in (2, 3, 5):
        each = [_ids(spec, parts=parts, part=k) for k in range(1, parts + 1)]
        assert sorted(i for ids in each for i in ids) == sorted(v.id for v in whole.vectors)
        thinned = sum(expand(spec, parts=parts, part=k).invalid["downsampled"]
                      for k in range(1, parts + 1))
        assert thinned == 8


def test_where_selects_from_the_downsampled_sweep():
    spec = spec_from_mapping(SU)
    whole = expand(spec)
    assert expand(spec, where="l == 128").summary() == \
        {"total": 8, "valid": 0, "invalid": {"downsampled": 8}}
    chosen = expand(spec, where="b >= 3")
    assert [v.id for v in chosen.vectors] == [v.id for v in whole.vectors if v.params["b"] >= 3]
    assert chosen.summary() == {"total": 8, "valid": 4, "invalid": {"downsampled": 4}}


def _reference(spec, parts=1, part=1, where=None):
    """Materialise the whole grid, downsample each suite (the seed's ``kept[1::2]`` loop),
    then take the part and the selection: what a stream of that part must hold."""
    from opatlas.expressions import Expression
    from opatlas.ops import get_op
    from opatlas.sweep.expand import Vector, _invalid_reason, grid, in_part

    op, fixed = get_op(spec.op)
    constraints = [Expression.parse(c) for c in spec.constraints]
    select = Expression.parse(where) if where else None

    def taken(v):
        return in_part(v.index, parts, part) and (select is None or select(v.params))

    invalid, invalid_vectors, suites = Counter(), [], {}
    for i, raw in enumerate(grid(spec)):
        vec = Vector.make(spec.op, raw, i)
        reason = _invalid_reason(op, fixed, raw, constraints)
        if reason is None:
            suites.setdefault(tuple(raw.get(k) for k in spec.suite_by), []).append(vec)
        elif taken(vec):
            invalid[reason] += 1
            invalid_vectors.append((vec, reason))
    vectors = []
    for members in suites.values():
        kept = members
        while len(kept) > spec.max_per_suite:
            kept = kept[1::2]
        vectors += [v for v in kept if taken(v)]
        invalid["downsampled"] += sum(taken(v) for v in members) - sum(map(taken, kept))
    return sorted(vectors, key=lambda v: v.index), invalid_vectors, +invalid


FILTERED = {"name": "filtered", "op": "linear",
            "params": {"mp": [1, 2, 4], "b": [1, 2, 3], "l": list(range(128, 1153, 128)),
                       "dim": [256, 384, 512, 1024]},
            "constraints": ["dim % (mp * 128) == 0", "l * b <= 2048"],
            "suite_by": ["mp", "b"], "max_per_suite": 5}


@settings(max_examples=15, deadline=None)
@given(parts=st.integers(1, 4), batch=st.sampled_from([1, 7, 20_000]),
       where=st.sampled_from([None, "l != 384 and dim >= 384"]))
def test_streamed_parts_and_selections_match_the_whole_grid_reference(parts, batch, where):
    spec = spec_from_mapping(FILTERED)
    for part in range(1, parts + 1):
        ref_vectors, ref_invalid, ref_counts = _reference(spec, parts, part, where)
        stream = VectorStream(spec, parts=parts, part=part, where=where, keep_invalid=True,
                              batch_size=batch)
        batches = list(stream)
        assert [(v.index, v.id) for b in batches for v in b.vectors] == \
            [(v.index, v.id) for v in ref_vectors]
        assert [(v.id, r) for b in batches for v, r in b.invalid] == \
            [(v.id, r) for v, r in ref_invalid]
        assert +stream.invalid == ref_counts and stream.valid == len(ref_vectors)


# -- 2. a parameter given in two places --------------------------------------------------------

def test_a_dtype_given_twice_is_refused_naming_both_keys(capsys, tmp_path):
    path = write_spec(tmp_path / "dt.yml", {"op": "linear", "dtype": "fp16", "params": {
        "dtype": ["bf16"], "b": [1], "l": [128], "dim": [512]}})
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(path))
    one_error(code, err, str(path), "key 'dtype', value 'fp16'", "params.dtype", "given twice")
    path = write_spec(tmp_path / "fx.yml", {"op": "linear", "fixed": {"b": 3}, "params": {
        "b": [1, 2], "l": [128], "dim": [512]}})
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(path))
    one_error(code, err, "key 'params.b', value [1, 2]", "fixed.b", "given twice")


# -- 3. the catalog's defaults ---------------------------------------------------------------

def test_a_size_whose_default_is_0_takes_0(tmp_path):
    path = write_spec(tmp_path / "ffn.yml", {"op": "linear", "params": {
        "b": [1], "l": [128], "dim": [512], "ffn": [0, 1024], "kv_heads": [0]}})
    assert [v.params["ffn"] for v in expand(load_spec(path)).vectors] == [0, 1024]
    bad = write_spec(tmp_path / "b0.yml", {"op": "linear", "params": {
        "b": [0], "l": [128], "dim": [512]}})
    try:
        load_spec(bad)
    except SpecError as exc:
        assert (exc.key, exc.value) == ("params.b", 0)
    else:
        raise AssertionError("b: [0] was taken")


def test_a_constraint_on_an_unlisted_op_parameter_says_it_must_be_listed(capsys, tmp_path):
    path = write_spec(tmp_path / "mp.yml", {"op": "linear", "params": {
        "b": [1], "l": [128], "dim": [512]}, "constraints": ["dim >= mp * 256"]})
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(path))
    line = one_error(code, err, "key 'constraints'", "names mp (default 1), a parameter of op "
                     "'linear' that the spec does not list: list it under params")
    assert "unknown" not in line


# -- 4. no valid vector ----------------------------------------------------------------------

def test_a_spec_with_no_valid_vector_is_refused_as_run_refuses_it(capsys, tmp_path):
    path = write_spec(tmp_path / "none.yml", {"op": "linear", "params": {
        "b": [1], "l": [128], "dim": [512]}, "constraints": ["dim > 5000"]})
    out = tmp_path / "call.json"
    for cmd in (["sweep", "expand", str(path), "--out", str(out)],
                ["run", str(path), "--store", str(tmp_path / "s.duckdb")]):
        code, _, err = cli_in_process(capsys, *cmd)
        one_error(code, err, "the spec has no valid vector", "1 violates: dim > 5000")
    assert not out.exists()


def test_an_empty_part_of_a_sweep_with_vectors_is_not_refused(capsys, tmp_path):
    path = write_spec(tmp_path / "su.yml", SU)
    code, out, _ = cli_in_process(capsys, "sweep", "expand", str(path), "--parts", "2",
                                  "--part", "1", "--json")
    assert code == 0 and json.loads(out) == {"total": 8, "valid": 0,
                                             "invalid": {"downsampled": 8}}


# -- 5. every problem of a spec --------------------------------------------------------------

def test_every_problem_of_a_spec_is_listed_with_its_key_and_value(capsys, tmp_path):
    path = Path(tmp_path / "multi.yml")
    path.write_text("op: linear\nrepeats: 0\nwarmup: -1\nfoo: 1\n"
                    "params: {b: [1], l: [128], dim: [512]}\n")
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(path))
    one_error(code, err, f"In file {path}, key 'repeats', value 0: Input should be greater "
                         f"than 0 (2 more problem(s))")
    assert "  also: key 'warmup', value -1: Input should be greater than or equal to 0" in err
    assert "  also: key 'foo', value 1: Extra inputs are not permitted" in err
    # a bad value pydantic tries as each form a value takes is one problem, not ten
    path.write_text("op: linear\nrepeats: 0\nparams: {b: [[1]], l: [128], dim: [512]}\n")
    code, _, err = cli_in_process(capsys, "sweep", "expand", str(path))
    one_error(code, err, "key 'params.b.0', value [1]", "(1 more problem(s))")
    assert err.count("also:") == 1 and "also: key 'repeats', value 0" in err


def test_a_where_value_no_vector_has_is_named_with_the_values(capsys):
    """A typo ('9x9', 'BLOKC') and an empty selection looked alike: the error names the value
    the parameter never takes and the values it does."""
    code, _, err = cli_in_process(capsys, "sweep", "expand", "reshard", "--where",
                                  "input_shard_strategy == 'BLOKC' and input_core_grid in "
                                  "['2x', '2x2']")
    one_error(code, err, "input_shard_strategy is never 'BLOKC' (its values: BLOCK, WIDTH, "
              "HEIGHT)", "input_core_grid is never '2x' (its values: 1x1, 1x2",
              "… (64 values)")
    code, _, err = cli_in_process(capsys, "sweep", "expand", "reshard", "--where",
                                  "input_core_grid == '2x2' and output_core_grid == '9x9'")
    line = one_error(code, err, "output_core_grid is never '9x9'")
    assert "input_core_grid is never" not in line
