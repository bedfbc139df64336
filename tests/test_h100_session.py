"""What the lent H100 brought back (issue 18), checked on the CPU: the bundled ``h100`` op
dataset (named like ``bundled``, read by fit, predict and the estimator through upstream's op
names), Fig. 24a's Nsight Compute parsing against its raw CSVs, and time-filled repeats
(``min_time_ms``), the runner-throughput fix measured there."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from opatlas.backends import get_backend
from opatlas.backends.base import MAX_FILL_REPEATS, repeats_to_fill
from opatlas.errors import OpatlasError
from opatlas.ops.registry import resolved_params
from opatlas.run.runner import setting_changes
from opatlas.samples import op_data_path

REPO = Path(__file__).resolve().parents[1]
RAW = REPO / "benchmarks" / "gpu_h100_2026-11-24"
H100_BF16_DENSE = 989.4e12  # the catalog's peak (NVIDIA datasheet, SXM5, dense)


# --- time-filled repeats --------------------------------------------------------------------

def test_repeats_fill_the_asked_time_at_the_samples_mean():
    # 20 samples of 20 µs = 0.4 ms; 10 ms asks 9.6 ms more at 20 µs: 480 repeats
    assert repeats_to_fill(10_000_000, [20_000] * 20) == 480
    assert repeats_to_fill(10_000_000, [1_000_000] * 20) == 0  # 20 ms already: none
    assert repeats_to_fill(0, [20_000] * 20) == 0  # off
    assert repeats_to_fill(10**12, [1] * 20) == MAX_FILL_REPEATS - 20  # capped in all


def test_min_time_ms_is_checked_and_recorded():
    with pytest.raises(OpatlasError, match="min_time_ms must be >= 0"):
        get_backend("cpu", min_time_ms=-1)
    with pytest.raises(OpatlasError, match="min_time_ms must be a number"):
        get_backend("cpu", min_time_ms="fast")
    assert get_backend("cpu", min_time_ms="2.5").versions()["min_time_ms"] == "2.5"
    assert "min_time_ms" not in get_backend("cpu").versions()


def test_a_short_op_is_timed_for_at_least_min_time_ms():
    op, p = resolved_params("linear", {"b": 1, "l": 16, "dim": 64, "role": "out",
                                       "dtype": "fp32"})
    plain = get_backend("cpu", threads=1).measure(op, p, ["fwd"], 5, 1)["fwd"]
    # 50 ms: more than 5 repeats of a ~20 µs linear take even on a loaded machine
    filled = get_backend("cpu", threads=1, min_time_ms=50).measure(op, p, ["fwd"], 5, 1)["fwd"]
    assert len(plain) == 5
    assert len(filled) > 5 and sum(filled) >= 50e6, (len(filled), sum(filled))


def test_repeats_are_not_compared_under_the_same_min_time():
    filled = json.dumps({"min_time_ms": "10"})
    assert setting_changes(473, filled, 20, filled) == []
    assert setting_changes(473, "{}", 20, "{}") == ["repeats 473 (this run: 20)"]
    # another min_time_ms is the difference; the stored counts are fill results, not settings
    assert setting_changes(473, filled, 20, json.dumps({"min_time_ms": "20"})) == \
        ["min_time_ms 10 (this run: 20)"]
    # fewer samples stored than this run asks for is a difference under any fill
    assert setting_changes(5, filled, 9, filled) == ["repeats 5 (this run: at least 9)"]
    assert setting_changes(5, "{}", 9, filled) == \
        ["repeats 5 (this run: at least 9)", "min_time_ms unset (this run: 10)"]


def test_min_time_ms_out_of_range_is_refused():
    for bad in ("1e-9", "1e9"):
        with pytest.raises(OpatlasError, match=r"min_time_ms must be 0 \(off\) or from 0\.001 to"):
            get_backend("cpu", min_time_ms=bad)


def test_predict_on_h100_data_picks_its_one_device(capsys):
    from conftest import cli_in_process

    code, out, err = cli_in_process(
        capsys, "predict", "rmsnorm", "--data", "h100", "--shape", "b=1,l=4096,dim=4096")
    assert code == 0, err
    assert "holds one device: H100-SXM5-80GB fp16" in err
    assert out.startswith("rmsnorm fwd: ")


def test_import_takes_the_h100_name(capsys, tmp_path):
    from conftest import cli_in_process

    code, out, err = cli_in_process(capsys, "import", "ett-samples", "h100", "--store",
                                    str(tmp_path / "h.duckdb"))
    assert code == 0, err
    assert "from 39 files" in out


# --- the bundled H100 dataset ---------------------------------------------------------------

def test_h100_names_the_bundled_h100_folder_and_a_path_wins(tmp_path, monkeypatch):
    folder = op_data_path("h100")
    assert folder.parts[-2:] == ("h100", "operator")
    names = sorted(f.name for f in folder.glob("*.csv"))
    assert len(names) == 39 and "NVIDIAH10080GBHBM3_linear_bf16.csv" in names
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h100").mkdir()
    assert op_data_path("h100") == Path("h100")  # a folder of the user's own


def test_h100_linear_times_stay_under_the_datasheet_peak():
    """Measured bf16 GEMMs: none faster than the H100's dense peak, the big ones near it."""
    rows = list(csv.DictReader((op_data_path("h100") /
                                "NVIDIAH10080GBHBM3_linear_bf16.csv").open()))
    assert len(rows) == 720  # 6 models x 4 mp x 3 b x 2 l x 5 roles
    rates = []
    for r in rows:
        op, p = resolved_params("linear", {k: (v if k == "role" else int(v))
                                           for k, v in r.items() if "dur" not in k})
        rates.append(op.flops(p)["fwd"] / (float(r["F_dur(us)"]) * 1e-6))
    assert max(rates) <= H100_BF16_DENSE
    assert max(rates) >= 0.5 * H100_BF16_DENSE, max(rates) / 1e12


def test_upstream_names_predict_from_the_catalog_sweeps_ops():
    from opatlas.predict import Predictor

    p = Predictor(device="H100", dtype="bf16", data="h100")
    shape = {"b": [1, 2], "l": [4096, 4096], "dim": [4096, 4096]}
    # a rename: upstream's RMSlayernorm is the catalog's rmsnorm, the op the sweep ran
    assert p.resolve_op("RMSlayernorm", shape)[0] == "rmsnorm"
    np.testing.assert_array_equal(p.predict("RMSlayernorm", shape, pass_="fwd"),
                                  p.predict("rmsnorm", shape, pass_="fwd"))
    # an alias that fixes a value: linear1 is linear with role qkv
    full = {**shape, "mp": [2, 2], "h": [32, 32], "kv_heads": [8, 8], "ffn": [14336, 14336],
            "vocab": [128256, 128256]}
    np.testing.assert_array_equal(p.predict("linear1", full, pass_="fwd"),
                                  p.predict("linear", {**full, "role": ["qkv"] * 2}, pass_="fwd"))


def test_wider_data_never_answers_for_a_narrower_name():
    """Data of linear1 (qkv only) must not answer for ``linear`` of any role."""
    from opatlas.predict.predictor import Predictor

    p = Predictor(device="A100", dtype="fp16")  # the bundled A100 data: linear1..4 files
    name, _ = p._filed_as("linear", {"b": [1], "l": [1024], "dim": [1024]})
    assert name == "linear"


def test_an_estimate_on_h100_data_finds_every_op_the_optimizer_at_its_fp32_states(capsys):
    from conftest import cli_in_process
    from opatlas.predict import Predictor

    code, out, err = cli_in_process(
        capsys, "estimate", str(REPO / "examples" / "estimate" / "llama-3.1-8b-dgx-h100.yml"),
        "--set", "ops.mode=data", "--set", "ops.data=h100", "--json")
    assert code == 0, err
    est = json.loads(out)
    assert est["notes"] == [
        "op middleStage_optimizer/step is timed from the data's fp32 measurements (the "
        "optimizer's states are fp32 in mixed precision; the data has no bf16 ones)"]
    assert "no measured data" not in err
    # the row is the fp32 data's model at the step's own parameter count
    [row] = [i for i in est["items"] if i["category"] == "optimizer"]
    n = int(row["shape"]["n_params"])
    adam = Predictor(device="H100", dtype="fp32", data="h100").predict(
        "middleStage_optimizer", {"n_params": [n], "mp": [1], "dim": [0], "encoders": [0],
                                  "ffn": [14336], "vocab": [128256]}, pass_="step")[0] * 1e-6
    # Adam plus the mixed-precision passes around it, streamed at Adam's rate: (28 + B) / 28
    passes = row["shape"]["passes_bytes_per_param"]
    assert row["time_s"] == pytest.approx(adam * (28 + passes) / 28, rel=1e-9)


# --- Fig. 24a: the parser against ncu's own CSVs --------------------------------------------

def _fig24a_script():
    spec = importlib.util.spec_from_file_location("gpu_fig24a", REPO / "scripts" / "gpu_fig24a.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["simt", "tf32", "bf16"])
def test_fig24a_bytes_are_the_gemm_kernels_read_plus_write(kind):
    mod = _fig24a_script()
    text = (RAW / f"ncu_{kind}.csv").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(lines[start:]))
    total, ns, names = mod.gemm_bytes(rows)
    gemm = [r for r in rows if r["Kernel Name"] == names[0]]
    by_metric = {r["Metric Name"]: float(r["Metric Value"].replace(",", "")) for r in gemm}
    assert len(names) == 1 and not mod.NOT_GEMM.search(names[0])
    assert total == by_metric["dram__bytes_read.sum"] + by_metric["dram__bytes_write.sum"]
    shipped = {r["kernel"]: r for r in csv.DictReader(
        (REPO / "src" / "opatlas" / "data" / "orojenesis" / "gpu_gemm4096_dram.csv").open())}
    assert int(total) == int(shipped[kind]["dram_bytes"]) and int(ns) == int(shipped[kind]["ns"])
    word = 2 if kind == "bf16" else 4
    assert total >= 2 * 4096**2 * word  # A and B are read at least once
