"""The store source: one row per measured vector, predicted by models that never saw it,
with bounds; a store without rows for the asked device is a clear error."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from opatlas.analyze import api
from opatlas.cli import main
from opatlas.devices import get_device
from opatlas.errors import OpatlasError
from opatlas.ops.batch import batch_counts
from opatlas.store import Store
from opatlas.store.db import ResultRow

SLOWDOWN = 1.25  # every kernel runs at 1/1.25 of its roofline


def _store(path, device: str = "A100") -> pd.DataFrame:
    shapes = pd.DataFrame([{"role": "qkv", "mp": mp, "b": b, "l": l, "dim": d}
                           for mp, b, l, d in itertools.product((1, 2), (1, 2), (512, 1024, 2048),
                                                                (1024, 2048))])
    c = batch_counts("linear", shapes.assign(dtype="fp16"))
    dev = get_device(device)
    seconds = SLOWDOWN * np.maximum(c["flops_fwd"] / dev.peak("fp16"),
                                    c["bytes_fwd"] / dev.bandwidth)
    with Store(path) as st:
        st.add_results([ResultRow(f"v{i}", "linear", json.dumps({**s, "dtype": "fp16"}), "fwd",
                                  "cuda", device, "fp16", "ok", repeats=5,
                                  median_ns=float(t) * 1e9, flops=float(f), min_bytes=float(b))
                        for i, (s, t, f, b) in enumerate(zip(shapes.to_dict("records"), seconds,
                                                            c["flops_fwd"], c["bytes_fwd"],
                                                            strict=True))])
    return shapes.assign(seconds=seconds, flops=c["flops_fwd"])


def test_store_rows_held_out_predictions_and_bounds(tmp_path):
    truth = _store(tmp_path / "s.duckdb")
    a = api.analyze(tmp_path / "s.duckdb")
    assert a.source.kind == "store" and a.group_label == "device"
    assert len(a.rows) == len(truth)
    assert a.rows["time_s"].sum() == pytest.approx(truth["seconds"].sum())
    assert a.total_time_s == pytest.approx(truth["seconds"].sum())
    # the efficiency is the same everywhere, so a model that never saw a row still gets it
    assert a.rows["predicted_time_s"].notna().all()
    assert a.rows["error"].abs().max() < 0.02
    # headroom is the measured time over the bound; the bound is at least the roofline
    assert (a.rows["bound_time_s"] >= a.rows["roofline_time_s"] * (1 - 1e-12)).all()
    assert np.allclose(a.rows["headroom"], a.rows["time_s"] / a.rows["bound_time_s"])
    gemm = a.rows[a.rows["orojenesis_bytes"].notna()]
    assert len(gemm) == len(a.rows)  # every linear is a GEMM with an Orojenesis bound
    assert a.rows["limiter"].isin(["compute", "memory"]).all()
    assert a.summary["device"] == "A100"


def test_store_without_the_device_or_rows_is_a_clear_error(tmp_path, capsys):
    _store(tmp_path / "s.duckdb")
    with pytest.raises(OpatlasError, match="no measurements for device 'H100'; it has A100"):
        api.analyze(tmp_path / "s.duckdb", device="H100")
    with Store(tmp_path / "empty.duckdb"):
        pass
    out = tmp_path / "rows.csv"
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(tmp_path / "empty.duckdb"), "--csv", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "empty.duckdb" in err and "no successful measurements" in err
    assert "Traceback" not in err and not out.exists()


def test_few_rows_get_no_prediction_and_strict_refuses(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        st.add_results([ResultRow("v1", "linear", json.dumps(
            {"role": "qkv", "b": 1, "l": 512, "dim": 1024, "dtype": "fp16"}), "fwd", "cuda", "A100",
            "fp16", "ok", repeats=5, median_ns=1e5, flops=1e9, min_bytes=1e7)])
    a = api.analyze(tmp_path / "s.duckdb")
    assert a.rows["predicted_time_s"].isna().all()
    assert any("no held-out prediction" in n for n in a.summary["notes"])
    with pytest.raises(OpatlasError, match="no held-out prediction"):
        api.analyze(tmp_path / "s.duckdb", strict=True)


def test_models_dir_predicts_with_saved_models(tmp_path):
    from opatlas.fit.recipes import RECIPE_REVISION, make_model
    from opatlas.fit.registry import ModelRegistry

    truth = _store(tmp_path / "s.duckdb")
    shapes = truth.drop(columns=["seconds", "flops"])
    model = make_model("hybrid", "linear", "fwd", get_device("A100"), "fp16").fit(
        shapes, truth["seconds"].to_numpy() * 2e6)  # a model that thinks it is 2x slower
    reg = ModelRegistry(tmp_path / "models")
    # saved as `opatlas fit --out` saves: the data's hash tagged with the recipes' revision
    reg.get_or_fit(("A100", "fp16", "hybrid", "linear", "fwd"), f"h:r{RECIPE_REVISION}", None,
                   lambda: model)
    a = api.analyze(tmp_path / "s.duckdb", models=tmp_path / "models")
    assert a.rows["error"].to_numpy() == pytest.approx(1.0, abs=0.02)
