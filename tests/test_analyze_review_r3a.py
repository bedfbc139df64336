"""Review r3 of ``opatlas analyze`` (part a): times below their bound flagged and said once for
every source whose rows go through why.explain; --models predictions labelled as the saved
models'; store --device under any alias; an empirical device said in the notes, with no
memory roof when no row can show the bandwidth; a CPU-only trace against a GPU's peaks said."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.analyze import api, why
from opatlas.analyze.model import Analysis, Source
from opatlas.analyze.synthetic import synthetic_trace
from opatlas.errors import OpatlasError
from opatlas.estimate import estimate_step, load_config
from opatlas.fit.data import UnknownDeviceWarning
from opatlas.store import Store
from opatlas.store.db import ResultRow

BELOW = "faster than their bound"
BF16 = "c10::BFloat16"


def _below_notes(a: Analysis) -> list[str]:
    return [n for n in a.summary.get("notes") or [] if BELOW in n]


# ------------------------------------------------------------ 1. below the bound

def _gpu_trace(path: Path) -> Path:
    """Two 4096³ bf16 GEMMs on an H100: the linear's kernel takes 10 µs (its roofline is
    139 µs: impossible), the mm's 300 µs."""
    ev = []
    for corr, (name, dims, dur) in enumerate(
            [("aten::linear", [[4096, 4096], [4096, 4096], []], 10.0),
             ("aten::mm", [[4096, 4096], [4096, 4096]], 300.0)], start=1):
        ts = 40.0 * corr
        ev += [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 20,
                "args": {"Input Dims": dims, "Input type": [BF16, BF16, ""][:len(dims)]}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                "ts": ts + 1, "dur": 2, "args": {"correlation": corr}},
               {"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7,
                "ts": 1000.0 * corr, "dur": dur, "args": {"correlation": corr}}]
    path.write_text(json.dumps({"deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}],
                                "traceEvents": ev}))
    return path


def test_a_trace_time_below_its_bound_is_flagged_and_said_once(tmp_path):
    a = api.analyze(_gpu_trace(tmp_path / "gpu.json"))
    by = {r["op"]: r for r in a.rows.to_dict("records")}
    lin, mm = by["linear"], by["mm"]
    expect = 2 * 4096**3 / why.Peaks("", 989.4e12, 1, 0).flops_s / 10e-6  # bound / time
    assert lin["headroom"] == pytest.approx(1 / expect, rel=1e-3)
    assert lin["flags"] == f"below bound: time is {lin['headroom']:.2f}x the bound"
    assert mm["flags"] == "" and mm["headroom"] > 1
    [note] = _below_notes(a)
    assert note.startswith("1 profiled row(s) faster than their bound (headroom < 1): "
                           "linear fwd (1); the lowest is 0.07x (linear fwd)")
    assert any(c.key == "flags" for c in a.columns)


def test_a_saved_analysis_keeps_its_one_note(tmp_path):
    a = api.analyze(_gpu_trace(tmp_path / "gpu.json"))
    a.save(tmp_path / "a.json")
    b = api.analyze(tmp_path / "a.json", kind="analysis")
    assert len(_below_notes(b)) == 1
    assert b.rows["flags"].str.startswith("below bound").sum() == 1


def test_a_config_measured_below_its_bound_is_flagged_and_said_on_stderr(tmp_path, capsys):
    est = estimate_step(load_config("llama2-7b"))
    plain = api.analyze("llama2-7b")
    row = plain.rows[(plain.rows["op"] == "linear3") & (plain.rows["pass"] == "fwd")].iloc[0]
    item = next(i for i in est.items if i.name == "linear3" and i.pass_ == "fwd")
    per_call = 0.1 * row["bound_time_s"] / row["calls"]  # ten times faster than the bound
    with Store(tmp_path / "m.duckdb") as st:
        st.add_results([ResultRow("v1", "linear3", json.dumps({**item.shape, "dtype": "bf16"}),
                                  "fwd", "cuda", "NVIDIAH10080GBHBM3", "bf16", "ok", repeats=5,
                                  median_ns=per_call * 1e9)])
    a = api.analyze("llama2-7b", measured=tmp_path / "m.duckdb")
    got = a.rows[(a.rows["op"] == "linear3") & (a.rows["pass"] == "fwd")].iloc[0]
    assert got["headroom"] == pytest.approx(0.1)
    assert got["flags"] == "below bound: time is 0.10x the bound"
    assert (a.rows["flags"] != "").sum() == 1
    [note] = _below_notes(a)
    assert note.startswith("1 row(s) faster than their bound (headroom < 1): linear3 fwd (1)")
    code, out, err = cli_in_process(capsys, "analyze", "llama2-7b", "--measured",
                                    str(tmp_path / "m.duckdb"), "--json")
    assert code == 0
    said = [ln for ln in err.splitlines() if BELOW in ln]
    assert len(said) == 1 and said[0].startswith("opatlas: note: 1 row(s)")
    assert len([n for n in json.loads(out)["summary"]["notes"] if BELOW in n]) == 1


def _res_add_store(path: Path, device: str = "A100", fast: int = 0) -> Path:
    """Three res_add rows (pure bandwidth); the first ``fast`` at half the bound's time."""
    from opatlas.devices import get_device

    bw = get_device("A100").bandwidth
    rows = []
    for i, n in enumerate((1, 2, 4)):
        nbytes = 6.0 * 2**20 * n
        seconds = nbytes / bw * (0.5 if i < fast else 1.3)
        rows.append(ResultRow(f"v{i}", "res_add", json.dumps(
            {"b": n, "l": 1024, "dim": 1024, "dtype": "fp16"}), "fwd", "cuda", device, "fp16",
            "ok", repeats=5, median_ns=seconds * 1e9, flops=2.0**20 * n, min_bytes=nbytes))
    with Store(path) as st:
        st.add_results(rows)
    return path


def test_a_store_below_its_bound_has_one_note_and_flags(tmp_path):
    a = api.analyze(_res_add_store(tmp_path / "s.duckdb", fast=2))
    [note] = _below_notes(a)
    assert note.startswith("2 measurement(s) faster than their bound (headroom < 1): "
                           "res_add fwd (2); the lowest is 0.50x (res_add fwd)")
    assert a.rows["flags"].tolist() == ["below bound: time is 0.50x the bound"] * 2 + [""]


def test_pybuda_rows_keep_their_own_note():
    """PyBuda flags and says its rows itself: the API adds no second note."""
    rows = pd.DataFrame({"op": ["a"], "pass": ["fwd"], "calls": [1], "time_s": [1.0],
                         "flops": [1.0], "bytes": [1.0], "bound_time_s": [2.0],
                         "limiter": ["compute"], "shape": [{}], "headroom": [0.5],
                         "flags": ["below bound: measured time is 0.50x the bound"]})
    a = Analysis(Source(kind="pybuda", path="x"), {"notes": ["its own"]}, rows)
    assert api.said_below_bound(a).summary["notes"] == ["its own"]
    b = Analysis(Source(kind="store", path="x"), {"notes": []}, rows)
    assert len(_below_notes(api.said_below_bound(b))) == 1


# ------------------------------------------------------------ 2. --models

class _Saved:
    """A stand-in for a model ``opatlas fit --out`` saved: 7 µs whatever the shape."""

    def predict(self, shapes: pd.DataFrame) -> np.ndarray:
        return np.full(len(shapes), 7.0)


def _models(root: Path, device: str = "A100") -> Path:
    from opatlas.fit.registry import ModelRegistry

    path = ModelRegistry(root).path(device, "fp16", "hybrid", "res_add", "fwd")
    path.parent.mkdir(parents=True)
    from opatlas.fit.recipes import RECIPE_REVISION

    # as `opatlas fit --out` saves one: its data's hash and the recipes' revision
    joblib.dump({"model": _Saved(), "meta": {"data_hash": f"0123:r{RECIPE_REVISION}"}}, path)
    return root


def test_saved_model_predictions_are_not_labelled_held_out(tmp_path):
    store = _res_add_store(tmp_path / "s.duckdb")
    a = api.analyze(store, models=_models(tmp_path / "models"))
    assert a.rows["predicted_time_s"].tolist() == pytest.approx([7e-6] * 3)
    assert a.rows["predicted_by"].eq("saved").all()
    assert a.summary["estimation_error_label"] == "median |error| (saved models)"
    [col] = [c for c in a.columns if c.key == "predicted_time_s"]
    assert "saved under" in col.help and "not held out" in col.help
    assert "cross-validation" not in col.help
    assert "predicted_by" in [c.key for c in a.columns]


def test_a_models_folder_that_is_missing_or_empty_exits_2(tmp_path, capsys):
    store = str(_res_add_store(tmp_path / "s.duckdb"))
    code, _, err = cli_in_process(capsys, "analyze", store, "--models", str(tmp_path / "no"),
                                  "--json")
    one_error(code, err, f"--models {tmp_path / 'no'}", "no such folder")
    (tmp_path / "empty").mkdir()
    code, _, err = cli_in_process(capsys, "analyze", store, "--models", str(tmp_path / "empty"),
                                  "--json")
    one_error(code, err, "--models", "holds no saved model")


# ------------------------------------------------------------ 3. --device aliases

@pytest.mark.parametrize("alias", ["A100", "A100-SXM4-80GB", "NVIDIAA100-SXM4-80GB"])
def test_store_device_is_found_under_any_alias(tmp_path, alias):
    store = _res_add_store(tmp_path / "s.duckdb", device="NVIDIAA100-SXM4-80GB")
    a = api.analyze(store, device=alias)
    assert len(a.rows) == 3 and a.summary["peak_bytes_s"] == pytest.approx(2.039e12)


def test_store_device_unknown_still_lists_what_it_has(tmp_path):
    from opatlas.errors import OpatlasError

    store = _res_add_store(tmp_path / "s.duckdb", device="NVIDIAA100-SXM4-80GB")
    with pytest.raises(OpatlasError, match="no measurements for device 'H100'; it has "
                                           "NVIDIAA100-SXM4-80GB"):
        api.analyze(store, device="H100")


# ------------------------------------------------------------ 4. empirical devices

# (flops, bytes, seconds): 100, 125 and 50 GFLOP/s at 1, 2.5 and 5 GB/s; every row at 10 or
# more FLOP/B, so none shows the bandwidth: the 5 GB/s of the third is set by its compute
GEMMS = [(1e9, 1e7, 0.01), (1e9, 2e7, 0.008), (1e9, 1e8, 0.02)]


def _cpu_store(path: Path, rows: list[tuple[str, float, float, float]]) -> Path:
    with Store(path) as st:
        st.add_results([ResultRow(f"v{i}", op, json.dumps(
            {"role": "qkv", "b": 1, "l": 512, "dim": 1024 + i, "dtype": "fp32"}
            if op == "linear" else {"b": 1, "l": 512, "dim": 1024 + i, "dtype": "fp32"}),
            "fwd", "cpu", "My CPU", "fp32", "ok", repeats=5, median_ns=s * 1e9, flops=f,
            min_bytes=b) for i, (op, f, b, s) in enumerate(rows)])
    return path


def test_a_gemm_only_empirical_store_has_no_memory_roof_and_says_so(tmp_path):
    store = _cpu_store(tmp_path / "g.duckdb", [("linear", *g) for g in GEMMS])
    with warnings.catch_warnings():  # the notes say it, once: fit's own warning is not shown
        warnings.simplefilter("error", UnknownDeviceWarning)
        a = api.analyze(store)
    assert a.rows["limiter"].tolist() == ["compute"] * 3  # the third was "memory"
    assert a.rows["util_memory"].isna().all()
    assert a.rows["headroom"].tolist() == pytest.approx([1.25, 1.0, 2.5])
    assert a.summary["peak_flops_s"] == pytest.approx(125e9)
    assert a.summary["peak_bytes_s"] is None
    assert a.summary["peaks"].startswith("empirical") and "no memory roof" in a.summary["peaks"]
    notes = a.summary["notes"]
    # without a memory roof, the first note names no bandwidth as a peak (the second says
    # why the 5 GB/s the rows reach is none)
    assert [n for n in notes if "peaks are empirical" in n] == [
        "My CPU is not in the catalog: its peaks are empirical, the best its own measurements "
        "attain (125.00 GFLOP/s fp32), not a datasheet's: util is relative to them, and 100% "
        "is the best measured, not the device's limit"]
    assert any("no memory roof" in n and "5.00 GB/s" in n for n in notes)
    a.save(tmp_path / "a.json")  # what --json, --save, --load and the HTML show
    kept = Analysis.load(tmp_path / "a.json")
    assert any("peaks are empirical" in n for n in kept.summary["notes"])
    assert kept.summary["peak_bytes_s"] is None


def test_an_empirical_store_with_a_bandwidth_bound_row_keeps_its_memory_roof(tmp_path):
    # an element-wise op at 0.25 FLOP/B moving 8 GB/s: evidence of the bandwidth
    store = _cpu_store(tmp_path / "m.duckdb", [("linear", *g) for g in GEMMS]
                       + [("res_add", 2e6, 8e6, 1e-3)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownDeviceWarning)
        a = api.analyze(store)
    assert a.summary["peak_bytes_s"] == pytest.approx(8e9)
    assert not any("no memory roof" in n for n in a.summary["notes"])
    assert any("peaks are empirical" in n and "(125.00 GFLOP/s fp32, 8.00 GB/s)" in n
               for n in a.summary["notes"])
    assert a.rows.set_index("op").loc["res_add", "limiter"] == "memory"


def test_a_store_device_is_matched_in_any_case(tmp_path):
    store = _cpu_store(tmp_path / "c.duckdb", [("linear", *g) for g in GEMMS])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(api.analyze(store, device="my cpu").rows) == 3
        with pytest.raises(OpatlasError, match="no measurements for device 'my gpu'; it has My CPU"):
            api.analyze(store, device="my gpu")


def test_memory_evidence_rule():
    assert why.memory_evidence([1e9, 2e6], [1e7, 8e6])  # 0.25 FLOP/B: element-wise
    assert why.memory_evidence([np.nan], [1e6])  # no FLOPs counted: a data move
    assert not why.memory_evidence([1e9, 1e9], [1e7, 1e8])  # 100 and 10 FLOP/B
    assert not why.memory_evidence([1e9], [np.nan])


def test_a_gemm_only_cpu_trace_has_no_memory_roof(tmp_path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100 * i,
           "dur": d, "args": {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float"] * 2}}
          for i, d in enumerate((20, 40))]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": ev}))
    a = api.analyze(tmp_path / "t.json")
    assert a.summary["peak_bytes_s"] is None and a.summary["onchip_bytes"] is None
    assert "no memory roof" in a.summary["peaks"]
    assert set(a.rows["limiter"]) == {"compute"}
    assert any("no memory roof" in n for n in a.summary["notes"])


# ------------------------------------------------------------ 5. CPU-only traces

def test_a_cpu_only_trace_against_a_gpu_is_said(tmp_path):
    synthetic_trace(tmp_path / "cpu.json", events=200, gpu=False)  # names an H100
    a = api.analyze(tmp_path / "cpu.json")
    assert a.summary["device"] == "H100-SXM5-80GB"
    said = [n for n in a.summary["notes"] if "no device (GPU) kernels" in n]
    assert len(said) == 1 and "CPU ops' self times" in said[0] and "H100" in said[0]
    synthetic_trace(tmp_path / "gpu.json", events=200)
    b = api.analyze(tmp_path / "gpu.json")
    assert not any("no device (GPU) kernels" in n for n in b.summary["notes"])


def test_the_report_draws_the_compute_roof_alone_without_a_memory_roof(tmp_path):
    """Peaks from the data with no bandwidth-bound op: the roofline chart keeps the points
    under the compute roof and says there is no memory roof (it drew nothing before)."""
    from conftest import CHROMIUM, playwright_or_skip

    sync_api = playwright_or_skip()
    a = api.analyze("llama2-7b")
    a.summary["peak_bytes_s"] = None
    report = api.write_html(a, tmp_path / "r.html")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--headless=new"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(report.as_uri())
        page.wait_for_selector("#roofline polyline", state="attached")
        tip = page.get_attribute("#roofline polyline", "data-tip")
        points = page.get_attribute("#roofline polyline", "points").split()
        dots = page.locator("#roofline circle").count()
        browser.close()
    assert errors == [] and tip.endswith("no memory roof (no op shows the bandwidth)")
    assert len(points) == 2 and points[0].split(",")[1] == points[1].split(",")[1]  # flat
    assert dots > 0
