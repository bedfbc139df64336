"""PyBuda analyzer follow-ups: one Tensix compute peak per (arch, fidelity) for the analysis,
the op model and the device catalog, at the fidelity the netlist states; and each epoch's
limiter taken from its slowest row, by the rows' rule."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import cli_in_process, one_error
from opatlas.analyze.sources import read
from opatlas.analyze.sources.pybuda import epoch_limiters, matmul_flops
from opatlas.devices import get_device, tensix_flop_per_cycle
from opatlas.tenstorrent.netlist import load_netlist
from opatlas.tenstorrent.opmodel import theoretical_matmul
from test_analyze_pybuda import NETLIST, make_run

TT = Path(__file__).parent / "data" / "tenstorrent"
RESNET = TT / "resnet50_hifi3_fp16b.netlist.yaml"   # every op HiFi3
BERT = TT / "bert_large_train_encoders.netlist.yaml"  # 370 ops LoFi, 11 HiFi3
T = 1e12


def _netlist(tmp_path: Path, **mm0: object) -> Path:
    """The synthetic netlist alone (the estimate), its matmul mm0 changed by ``mm0`` (a None
    value drops the key)."""
    doc = copy.deepcopy(NETLIST)
    op = doc["graphs"]["fwd_0_0_temporal_epoch_0"]["mm0"]
    for key, value in mm0.items():
        if value is None:
            op.pop(key)
        else:
            op[key] = value
    path = tmp_path / "model_netlist.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ---------------------------------------------------------------- 1. one compute peak

def test_tensix_rates_by_hand():
    # Wormhole FPU: 8x16 by 16x16 a cycle = 2·8·16·16 = 4096 FLOP at LoFi, over the phases
    for fid, want in (("LoFi", 4096), ("HiFi2", 2048), ("HiFi3", 4096 / 3), ("HiFi4", 1024)):
        assert tensix_flop_per_cycle("wormhole_b0", fid) == pytest.approx(want)
    # Grayskull: PyBuda's 32 cycles per 32x32x32 tile product and phase = 65536 / 32
    assert tensix_flop_per_cycle("grayskull") == 2048
    assert tensix_flop_per_cycle("grayskull", "HiFi4") == 512


def test_the_catalogs_n150_is_the_same_rate_at_the_card_sheets_fidelities():
    n150 = get_device("Wormhole-n150")
    # 72 cores x 1 GHz x 4096 / phases: FP16/BF16 at HiFi4, BLOCKFP8 at HiFi2, FP8 at LoFi
    assert n150.peak("bf16") == n150.peak("fp16") == pytest.approx(73.728 * T)
    assert n150.peak("bfp8") == pytest.approx(147.456 * T)
    assert n150.peak("fp8") == pytest.approx(294.912 * T)
    # the sheet's FP16 74 and BLOCKFP8 148 are these, rounded
    assert round(n150.peak("bf16") / T) == 74 and round(n150.peak("bfp8") / T) == 147


def test_a_hifi3_netlists_peak_is_the_hifi3_rate():
    s = read(RESNET).summary
    assert s["peak_flops_s"] == pytest.approx(72 * 4096 / 3 * 1e9)  # 98.3, was 294.9 (LoFi)
    assert s["peak_compute_basis"] == "72 cores x 4096/3 FLOP/cycle (HiFi3) x 1 GHz"


def test_a_mixed_netlists_peak_is_its_fastest_fidelity():
    s = read(BERT).summary
    assert s["peak_flops_s"] == pytest.approx(72 * 4096 * 1e9)  # LoFi matmuls: 294.9


def test_grayskull_peak_is_pybudas_rate_and_agrees_with_the_op_model(tmp_path):
    netlist = make_run(tmp_path / "run")
    netlist.write_text(netlist.read_text().replace("wormhole_b0", "grayskull"))
    s = read(tmp_path / "run").summary
    # 110 cores (its assumed 11x10 grid) x 2048/3 (HiFi3) x 1.2 GHz; was 4096 x 110 x 1.2 GHz
    assert s["peak_flops_s"] == pytest.approx(110 * 2048 / 3 * 1.2e9)
    mm0 = load_netlist(netlist).ops["fwd_0_0_temporal_epoch_0"]["mm0"]
    theo = theoretical_matmul(mm0, "grayskull")
    assert theo == 128 * 3 * 32  # 1·4·2·2·2·2·2 tile products x HiFi3 x 32 cycles
    # the op model's math-bound rate on all cores is the summary's peak
    per_core = matmul_flops(mm0) / theo / mm0.cores
    assert per_core * s["core_count"] * s["clock_hz"] == pytest.approx(s["peak_flops_s"])


def test_a_matmul_stating_no_fidelity_is_bounded_at_lofi_and_said(tmp_path):
    a = read(_netlist(tmp_path, math_fidelity=None))
    mm0 = a.rows.set_index("op").loc["mm0"]
    assert mm0["theoretical_cycles"] == 128 * 16  # LoFi; the old HiFi4 default gave 8192
    # the op model keeps HiFi4: 512·15.516 + 48·47.701 + 16·93.197 + 192·3.333
    assert mm0["estimated_cycles"] == 12364
    assert a.summary["peak_flops_s"] == pytest.approx(72 * 4096 * 1e9)
    assert [n for n in a.summary["notes"] if "1 matmul(s)" in n and "state no math_fidelity" in n]


def test_an_unknown_fidelity_is_one_error_naming_the_key(tmp_path, capsys):
    path = _netlist(tmp_path, math_fidelity="HiFi5")  # read as HiFi4 before, silently
    code, _, err = cli_in_process(capsys, "analyze", str(path), "--json")
    one_error(code, err, str(path), "graphs.fwd_0_0_temporal_epoch_0.mm0.math_fidelity",
              "HiFi5")


# ---------------------------------------------------------------- 2. the epoch's limiter

@pytest.mark.parametrize("netlist", [RESNET, BERT], ids=["resnet50", "bert"])
def test_each_epochs_limiter_is_its_slowest_rows(netlist):
    a = read(netlist)
    rows = a.rows.set_index(["epoch", "op"])
    for e in a.summary["epoch_summary"]:
        row = rows.loc[(e["epoch"], e["slowest_op"])]
        assert (e["limiter"], e["bw_problem"]) == (row["limiter"], row["bw_problem"])


def test_berts_softmax_epochs_are_unknown_not_compute():
    """Epochs 0-2 of BERT run at the pace of an exp (no FLOP count, no DRAM traffic: no
    bound); its row says unknown, and the epoch said compute."""
    epochs = read(BERT).summary["epoch_summary"]
    assert [(e["slowest_op"], e["limiter"]) for e in epochs[:3]] == [
        ("softmax_18.dc.exp.2", "unknown"), ("softmax_71.dc.exp.2", "unknown"),
        ("softmax_124.dc.exp.2", "unknown")]
    # resnet's epoch 0 was "noc in0": the pipe, in words no row uses
    first = read(RESNET).summary["epoch_summary"][0]
    assert (first["limiter"], first["bw_problem"]) == ("communication", "noc in0")


def test_a_measured_runs_epochs_have_their_slowest_rows_limiter(tmp_path):
    make_run(tmp_path / "run")
    e0, e1 = read(tmp_path / "run").summary["epoch_summary"]
    assert (e0["slowest_op"], e0["limiter"], e0["bw_problem"]) == (
        "gelu0", "communication", "output")  # its output pipe to mm0's epoch, over the NoC
    assert (e1["slowest_op"], e1["limiter"], e1["bw_problem"]) == ("add0", "memory", "")


def test_an_epoch_without_a_slowest_op_is_unknown():
    rows = pd.DataFrame({"epoch": [0], "op": ["sparse"], "limiter": ["unknown"],
                         "bw_problem": [""]})
    (e,) = epoch_limiters([{"epoch": 0, "slowest_op": None, "pipeline_cycles": 0}], rows)
    assert (e["limiter"], e["bw_problem"], e["pipeline_cycles"]) == ("unknown", "", 0)
