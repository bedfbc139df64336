"""Reviewed defects of omitted parameters and float ranges: the estimate-train-time export
keeps rows that leave out a parameter (filled with the catalog's default), fit data and its
index fill them too (a store mixing specs with and without ``mp``), and float ranges expand
without float noise while integer ranges keep their vector ids."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

from conftest import write_spec
from opatlas.errors import SpecError
from opatlas.spec import load_spec
from opatlas.spec.loader import spec_from_mapping
from opatlas.spec.model import ParamRange
from opatlas.store import Store
from opatlas.store.db import ResultRow
from opatlas.store.ett import export_ett, export_ett_report
from opatlas.sweep import expand, vector_id
from opatlas.sweep.expand import fill_omitted

REPO = Path(__file__).resolve().parents[1]
A100 = "NVIDIAA100-SXM4-80GB"


def _row(op: str, params: dict, pass_: str, us: float, device: str = "MYCPU",
         backend: str = "cpu") -> ResultRow:
    full = {**params, "dtype": "fp32"}
    return ResultRow(vector_id(op, full), op, json.dumps(full), pass_, backend, device, "fp32",
                     "ok", repeats=3, median_ns=us * 1e3, mean_ns=us * 1e3)


def _gelu_store(path: Path) -> Path:
    """gelu from a spec without mp (b: [1, 2], l: [64, 128, 256], dim: [256, 512]) and one
    vector with mp: [2]."""
    rows = [_row("gelu", {"b": b, "l": l, "dim": d}, p, b * l * d / 1e3)
            for b in (1, 2) for l in (64, 128, 256) for d in (256, 512) for p in ("fwd", "bwd")]
    rows += [_row("gelu", {"b": 1, "l": 64, "dim": 256, "mp": 2}, p, 9.0) for p in ("fwd", "bwd")]
    with Store(path) as st:
        st.add_results(rows)
    return path


# 1: the ett export writes every ok row ------------------------------------------------------
def test_ett_export_fills_an_omitted_parameter_with_its_default(tmp_path, capsys):
    store = _gelu_store(tmp_path / "g.duckdb")
    with Store(store, read_only=True) as st:
        paths = export_ett(st, tmp_path / "out")
    err = capsys.readouterr().err
    assert [p.name for p in paths] == ["MYCPU_gelu_fp32.csv"]
    csv = pd.read_csv(paths[0])
    assert len(csv) == 13  # all 12 vectors without mp, and the one with mp=2
    assert list(csv.columns) == ["b", "l", "dim", "mp", "F_dur(us)", "B_dur(us)"]
    assert sorted(csv["mp"].tolist()) == [1] * 12 + [2]
    assert csv["mp"].dtype.kind == "i"  # written 1, not 1.0
    one = csv[(csv["b"] == 2) & (csv["l"] == 256) & (csv["dim"] == 512)]
    assert one["F_dur(us)"].tolist() == [pytest.approx(262.144)]
    notes = [ln for ln in err.splitlines() if "leave out mp" in ln]
    assert notes == ["opatlas: note: gelu: 24 ok result row(s) leave out mp, taken as the "
                     "catalog's default mp=1 (opatlas ops)"]


def test_ett_export_counts_and_says_a_row_it_cannot_write(tmp_path, capsys):
    rows = [_row("myop", {"a": a}, "fwd", 1.0 + a) for a in (1, 2, 3)]
    rows += [_row("myop", {"a": 4, "k": 7}, "fwd", 5.0)]
    with Store(tmp_path / "m.duckdb") as st:
        st.add_results(rows)
    with Store(tmp_path / "m.duckdb", read_only=True) as st:
        done = export_ett_report(st, tmp_path / "out")
        export_ett(st, tmp_path / "out2")
    assert done.unwritten == 3  # k has no default: the rows without it cannot share the file
    assert pd.read_csv(done.paths[0]).to_dict("records") == \
        [{"a": 4, "k": 7, "F_dur(us)": 5.0}]
    assert ("opatlas: note: myop: 3 ok result row(s) leave out k, which other rows give and "
            "the catalog has no default for: not written") in capsys.readouterr().err


def test_ett_export_writes_a_shape_measured_twice_on_two_lines(tmp_path, capsys):
    rows = [_row("gelu", {"b": 1, "l": 64, "dim": 256}, "fwd", 3.0),
            _row("gelu", {"b": 1, "l": 64, "dim": 256, "mp": 1}, "fwd", 4.0),
            _row("gelu", {"b": 1, "l": 64, "dim": 256}, "fwd", 5.0, backend="other")]
    with Store(tmp_path / "d.duckdb") as st:
        st.add_results(rows)
    with Store(tmp_path / "d.duckdb", read_only=True) as st:
        done = export_ett_report(st, tmp_path / "out")
    assert sorted(pd.read_csv(done.paths[0])["F_dur(us)"]) == [3.0, 4.0, 5.0]
    assert any("2 shape(s) on more than one line" in n for n in done.notes), done.notes


# 2: fit data and its index fill an omitted parameter ----------------------------------------
def _linear_store(path: Path, with_mp2: bool) -> Path:
    """A linear (role qkv) measured without mp, at 60% of an A100's fp32 peak plus 5 µs;
    ``with_mp2`` adds one vector with mp: [2]."""
    from opatlas.ops.registry import resolved_params

    def us(p: dict) -> float:
        op, full = resolved_params("linear", {**p, "dtype": "fp32"})
        return op.flops(full)["fwd"] / (0.6 * 19.5e12) * 1e6 + 5.0

    shapes = [{"role": "qkv", "b": b, "l": l, "dim": d} for b in (1, 2, 4)
              for l in (64, 128, 256, 512, 1024) for d in (256, 512, 1024, 2048)]
    if with_mp2:
        shapes.append({"role": "qkv", "b": 1, "l": 128, "dim": 512, "mp": 2})
    with Store(path) as st:
        st.add_results([_row("linear", s, "fwd", us(s), device=A100) for s in shapes])
    return path


def test_fit_data_fills_an_omitted_parameter_with_its_default(tmp_path, capsys):
    from opatlas.fit.data import load_op_data, shapes_of

    df = load_op_data(_linear_store(tmp_path / "l.duckdb", with_mp2=True))
    err = capsys.readouterr().err
    assert len(df) == 61
    mp = [json.loads(s).get("mp") for s in df["params_json"]]
    assert sorted(mp) == [1] * 60 + [2]
    assert shapes_of(df)["mp"].tolist() == mp
    assert err.count("leave out mp") == 1
    assert "linear: 60 row(s) of the data leave out mp, taken as the catalog's default mp=1" \
        in err
    # a frame read some other way: shapes_of fills it as well, never a NaN feature
    raw = pd.DataFrame({"op": "linear", "params_json": [
        json.dumps({"b": 1, "l": 64, "dim": 256}), json.dumps({"b": 1, "l": 64, "dim": 256,
                                                               "mp": 2})]})
    assert shapes_of(raw)["mp"].tolist() == [1, 2]


def test_fit_index_ranges_count_an_omitted_parameter_as_its_default(tmp_path):
    from opatlas.fit.index import DataIndex

    index = DataIndex(_linear_store(tmp_path / "l.duckdb", with_mp2=True), tmp_path / "cache")
    group = index.group("linear", "fwd", "A100-SXM4-80GB", "fp32")
    assert group is not None and group["ranges"]["mp"] == [1, 2]
    assert "mp" in group["params"] and group["rows"] == 61


def test_predict_is_unchanged_by_one_vector_giving_the_parameter(tmp_path, monkeypatch):
    from opatlas.predict import Predictor

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    shape = {"b": 1, "l": 128, "dim": 512, "role": "qkv"}
    got = {}
    for with_mp2 in (False, True):
        store = _linear_store(tmp_path / f"l{with_mp2}.duckdb", with_mp2)
        pred = Predictor(device=A100, dtype="fp32", data=store, cache_dir=tmp_path / "models")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no log1p/cast/divide of NaN
            row = {**shape, **pred.shape_defaults("linear", list(shape))}
            assert pred.outside_range("linear", row) == []  # mp=1 was measured
            got[with_mp2] = float(pred.predict("linear", row)[0])
    measured = 2 * 128 * 512 * 3 * 512 / (0.6 * 19.5e12) * 1e6 + 5.0
    assert got[False] == pytest.approx(measured, rel=0.25)
    assert got[True] == pytest.approx(got[False], rel=0.1)


def test_fill_omitted_takes_an_aliases_fixed_value_and_leaves_the_input():
    rows = [{"b": 1, "l": 2, "dim": 3}, {"b": 1, "l": 2, "dim": 3, "role": "out"}]
    done = fill_omitted("linear1", rows)  # linear1 is linear with role qkv
    assert [p["role"] for p in done.params] == ["qkv", "out"]
    assert done.filled == {"role": ("qkv", 1)} and "role" not in rows[0]
    assert fill_omitted("gelu", [{"b": 1}, {"b": 2}]).filled == {}


# 3: float ranges without float noise; integer ranges unchanged ------------------------------
def test_float_range_values_are_rounded_and_the_end_is_kept():
    assert ParamRange(start=0.1, step=0.1, end=0.7).values() == \
        [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    tenths = ParamRange(start=0, step=0.1, end=1).values()
    assert len(tenths) == 11 and tenths[3] == 0.3 and tenths[-1] == 1.0
    assert ParamRange(start=0.1, step=0.2, end=0.7).values() == [0.1, 0.3, 0.5, 0.7]
    assert ParamRange(start=0.1, step=3, end=8.1, mode="mul").values() == [0.1, 0.3, 0.9, 2.7,
                                                                           8.1]
    halves = ParamRange(start=1, step=0.5, end=3).values()
    assert halves == [1, 1.5, 2.0, 2.5, 3.0] and isinstance(halves[0], int)  # as before
    ints = ParamRange(start=128, step=128, end=512).values()
    assert ints == [128, 256, 384, 512] and all(type(v) is int for v in ints)


def test_a_float_range_value_is_the_literal_one(tmp_path):
    base = {"op": "attention_dropout", "params": {"b": [1], "l": [64], "h": [4]}}
    ranged = write_spec(tmp_path / "fl.yml", {"name": "fl", **base, "params": {
        **base["params"], "p": {"start": 0.1, "step": 0.1, "end": 0.7}}})
    literal = write_spec(tmp_path / "fl3.yml", {"name": "fl3", **base, "params": {
        **base["params"], "p": [0.3]}})
    picked = expand(load_spec(ranged), where="p == 0.3").vectors
    assert [v.params["p"] for v in picked] == [0.3]
    assert picked[0].id == expand(load_spec(literal)).vectors[0].id


def test_a_range_that_never_ends_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="finite"):  # it would expand forever
        ParamRange(start=1, step=2, end=float("inf"), mode="mul")
    with pytest.raises(SpecError, match="start, step and end must be finite numbers"):
        spec_from_mapping({"op": "gelu", "params": {"b": [1], "l": [1], "dim": {
            "start": 1, "step": 2, "end": float("inf"), "mode": "mul"}}})


# the ids these specs expanded to before the float-range change (count, sha256 of the ids)
PINNED = {
    "examples/specs/linear.yml": (256, "b3e44dfc8ada251d"),
    "examples/specs/ett_flash_atten.yml": (10530, "0bb4511fdde2911c"),
    "src/opatlas/specs/demo-linear.yml": (32, "04878ce6b26722b1"),
    "src/opatlas/specs/demo-layernorm.yml": (12, "8b85f2676e79453a"),
    "src/opatlas/specs/demo-bmm.yml": (16, "0aee132634e3d21c"),
    "src/opatlas/specs/demo-gelu.yml": (8, "23640e54c2ad6370"),
}


@pytest.mark.parametrize("path", sorted(PINNED))
def test_integer_range_specs_keep_their_vector_ids(path):
    ex = expand(load_spec(REPO / path), keep_invalid=True)
    ids = [v.id for v in ex.vectors] + [v.id for v, _ in ex.invalid_vectors]
    assert (len(ids), hashlib.sha256("".join(ids).encode()).hexdigest()[:16]) == PINNED[path]


def test_fit_data_fills_per_device_and_dtype_not_across_them(capsys):
    """One device's spec giving a parameter without a default is no gap in another device's
    rows: each model group (op, device, dtype) is filled on its own, as the ETT export is."""
    from opatlas.fit.data import with_defaults

    rows = [{"op": "gelu", "pass": "fwd", "device": dev, "dtype": "fp32", "y_us": 1.0,
             "params_json": json.dumps({"b": b, "l": 64, "dim": 256, **extra})}
            for dev, extra in (("DEVA", {}), ("DEVB", {"extra": 3})) for b in range(1, 13)]
    out = with_defaults(pd.DataFrame(rows))
    assert out["device"].value_counts().to_dict() == {"DEVA": 12, "DEVB": 12}
    assert "left out of the fit" not in capsys.readouterr().err


def test_large_float_ranges_keep_every_value_exact():
    """Only float noise is rounded away: values of 13 digits stay distinct and in range."""
    assert ParamRange(start=1.0e13, step=1.0, end=1.0e13 + 4).values() == [
        1.0e13 + i for i in range(5)]
    assert ParamRange(start=2.0**40, step=1.0, end=2.0**40 + 3).values() == [
        2.0**40 + i for i in range(4)]
    assert ParamRange(start=1.0, step=3.0, end=3.0**26, mode="mul").values()[-1] == 3.0**26
    assert ParamRange(start=1.0, step=1.1, end=1.5, mode="mul").values() == [1.0, 1.1, 1.21,
                                                                               1.331, 1.4641]
