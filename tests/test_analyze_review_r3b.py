"""Review r3 of `opatlas analyze` on Tenstorrent inputs: PyBuda's limiter in the other sources'
words, the plain table's util beside the time it belongs to (and its epoch column), an empty
named signpost window refused, tt-metal convs bounded, a run without balancer scores, and
percent figures labelled apart from the views' fractions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import cli_in_process, one_error
from opatlas.analyze import api
from opatlas.analyze.sources.pybuda import kernel_verdict
from opatlas.analyze.tables import detail_tables, plain_columns, summary_items
from opatlas.analyze.why import OVERHEAD_HEADROOM
from opatlas.errors import OpatlasError
from test_analyze_pybuda import make_run

TT = Path(__file__).parent / "data" / "tenstorrent"
CSV = TT / "ops_perf_results_2025_09_18_11_39_20.csv"
RESNET = TT / "resnet50_hifi3_fp16b.netlist.yaml"
BERT = TT / "bert_large_train_encoders.netlist.yaml"


def _tt() -> None:
    pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")


# ---------------------------------------------------------------- 1: PyBuda's limiter

def test_kernel_verdict_needs_a_bound_and_turns_overhead_past_the_threshold():
    assert kernel_verdict("compute", None, None) == "unknown"
    assert kernel_verdict("compute", 1e-6, OVERHEAD_HEADROOM * 1.01) == "overhead"
    assert kernel_verdict("compute", 1e-6, OVERHEAD_HEADROOM, floor=1e-6) == "compute"
    assert kernel_verdict("compute", 1e-6, 2.0) == "memory"  # no compute floor: DRAM bytes
    # a pipe's verdict stands: the NoC is in no bound, a DRAM pipe runs at the balancer's share
    assert kernel_verdict("communication", None, None) == "communication"
    assert kernel_verdict("memory", 1e-6, 40.0) == "memory"


def test_resnet_estimate_calls_no_unbounded_op_compute():
    a = api.analyze(RESNET)
    rows = a.rows.set_index("op")
    # 0 FLOPs, no DRAM traffic: no bound at all
    for op in ("add_69", "max_pool2d_14.dc.reduce_max.6"):
        assert rows.loc[op, "bound_time_s"] != rows.loc[op, "bound_time_s"]  # NaN: none
        assert rows.loc[op, "limiter"] == "unknown"
    nop = rows.loc["buffer_5_add_254_add_297"]  # only a DRAM bound, 29x over it
    assert nop["headroom"] == pytest.approx(29.32, abs=0.01) and nop["limiter"] == "overhead"
    compute = a.rows[a.rows["limiter"] == "compute"]
    assert len(compute) and compute["bound_time_s"].notna().all()
    assert (compute["headroom"] <= OVERHEAD_HEADROOM).all()


def test_bert_element_wise_ops_without_a_bound_are_unknown():
    a = api.analyze(BERT)
    unbounded = a.rows[a.rows["bound_time_s"].isna()]
    assert len(unbounded) > 100
    assert not unbounded["limiter"].eq("compute").any()
    assert unbounded["limiter"].eq("unknown").sum() >= 100


# ---------------------------------------------------------------- 2: the plain table

def test_plain_table_shows_the_epoch_and_the_util_of_the_time_shown(tmp_path, capsys):
    make_run(tmp_path / "run")
    a = api.analyze(tmp_path / "run")
    keys = [c.key for c in plain_columns(a)]
    assert "epoch" in keys and "bw_util" in keys and "util" not in keys
    code, out, _ = cli_in_process(capsys, "analyze", str(tmp_path / "run"))
    assert code == 0
    header = next(ln for ln in out.splitlines() if "┃ name" in ln)
    assert "epoch" in header and "bw_util" in header
    gelu = next(ln for ln in out.splitlines() if "gelu0" in ln)
    # 15.0 µs is the bandwidth-bound time: its util is 10 %, the kernel's 30 % is not shown
    assert "15.0 µs" in gelu and "10.0%" in gelu and "30.0%" not in gelu
    add = next(ln for ln in out.splitlines() if "add0" in ln)
    assert "│ 1 " in add  # epoch 1


def test_plain_table_shows_tt_metal_devices():
    _tt()
    a = api.analyze(CSV, extra={"ignore_signposts": True})
    assert "device" in [c.key for c in plain_columns(a)]


# ---------------------------------------------------------------- 3: empty named window

def test_named_signpost_window_with_no_op_is_an_error(capsys):
    _tt()
    with pytest.raises(OpatlasError, match="no device operation after 'ResNet module finished'"):
        api.analyze(CSV, extra={"start_signpost": "ResNet module finished",
                                "end_signpost": "ResNet module started"})
    code, out, err = cli_in_process(capsys, "analyze", str(CSV), "--start-signpost",
                                    "ResNet module finished", "--end-signpost",
                                    "ResNet module started", "--json")
    one_error(code, err, "no device operation", "before the start one", "--ignore-signposts")
    assert out == ""


def test_default_empty_window_still_falls_back_to_the_whole_file():
    _tt()
    a = api.analyze(CSV)
    assert a.summary["window"] == "whole file (signposts ignored)" and len(a.rows) == 621
    assert any("analysing the whole file instead" in n for n in a.summary["notes"])


def test_a_profile_of_signposts_only_is_an_error(tmp_path):
    _tt()
    import pandas as pd

    df = pd.read_csv(CSV, low_memory=False)
    path = tmp_path / "ops_perf_results_signposts.csv"
    df[df["OP TYPE"] == "signpost"].to_csv(path, index=False)
    with pytest.raises(OpatlasError, match="holds no device operation"):
        api.analyze(path)


# ---------------------------------------------------------------- 4: tt-metal convs

def test_convs_get_the_compute_bound():
    _tt()
    from opatlas.analyze.sources.ttmetal import COMPUTE_ONLY

    a = api.analyze(CSV, extra={"ignore_signposts": True})
    conv = a.rows[a.rows["op_code"] == "OptimizedConvNew"]
    assert len(conv) == 54
    assert conv["bound_time_s"].notna().all() and (conv["bound_source"] == COMPUTE_ONLY).all()
    # FLOPs / (peak per core at the fidelity x cores): tt-perf-report's FLOPs % is bound / time
    assert (1 / conv["headroom"]).to_numpy() == pytest.approx(conv["flops_util"].to_numpy())
    first = conv.iloc[0]  # 122880 x 392 x 64 on 20 cores at HiFi4
    assert first["flops"] == 2 * 122880 * 392 * 64
    assert conv["limiter"].eq("compute").all()
    assert a.summary["bounds"]["compute_only"] == 54


# ---------------------------------------------------------------- 5: no balancer scores

def test_run_without_balancer_scores_shows_them_unknown(tmp_path):
    make_run(tmp_path / "run")
    (tmp_path / "run" / "balancer_score.csv").unlink()
    a = api.analyze(tmp_path / "run")
    assert a.summary["balancer_solution_score"] is None
    assert all(e["balancer_epoch_score"] is None for e in a.summary["epoch_summary"])
    items = {label: value for label, value, _ in summary_items(a)}
    assert items["balancer solution score"] == "-"
    assert any("no balancer_score.csv" in n for n in a.summary["notes"])
    assert json.loads(json.dumps(a.to_json()))["summary"]["balancer_solution_score"] is None


def test_run_with_balancer_scores_keeps_them(tmp_path):
    make_run(tmp_path / "run")
    a = api.analyze(tmp_path / "run")
    assert a.summary["balancer_solution_score"] == 55.0
    assert not any("balancer_score" in n for n in a.summary["notes"])


# ---------------------------------------------------------------- 6: units

def test_pybuda_percent_figures_are_labelled_as_percents(tmp_path):
    make_run(tmp_path / "run")
    a = api.analyze(tmp_path / "run")
    s = a.summary
    # the same utilization: a fraction for the views, PyBuda's percent beside it, said so
    assert s["utilization"] == pytest.approx(s["overall_util"] / 100)
    assert "overall_util" in s["percent_keys"] and "epoch_summary.math_util" in s["percent_keys"]
    items = {label: value for label, value, _ in summary_items(a)}
    assert items["overall util"] == "2.22%" and items["approx. math utilization"] == "2.2%"
    assert items["mean |kernel estimate error|"] == "11.0%"  # once, with no sign
    assert "percent keys" not in items
    epochs = next(d for d in detail_tables(a) if d["title"] == "epoch summary")
    assert epochs["rows"][0]["math_util (%)"] == 2.5 and "math_util" not in epochs["rows"][0]
    assert "balancer_util (%)" in epochs["rows"][0]


def test_netlist_estimate_labels_its_epoch_util_percent():
    a = api.analyze(RESNET)
    epochs = next(d for d in detail_tables(a) if d["title"] == "epoch summary")
    assert "balancer_util (%)" in epochs["rows"][0] and "util (%)" not in epochs["rows"][0]


def test_tt_metal_total_share_is_a_described_fraction(tmp_path):
    _tt()
    a = api.analyze(CSV, extra={"ignore_signposts": True})
    assert not {"total_pct", "dram_pct", "flops_pct"} & set(a.rows.columns)
    col = next(c for c in a.columns if c.key == "total_share")
    assert col.unit == "%" and col.label == "Total %"
    assert a.rows["total_share"].sum() == pytest.approx(1.0, abs=1e-6)
    assert (a.rows["total_share"].dropna() <= 1).all()
    saved = a.save(tmp_path / "a.json")
    assert api.load(saved).rows["total_share"].sum() == pytest.approx(1.0, abs=1e-6)


def test_cli_says_a_missing_balancer_score_and_prints_null(tmp_path, capsys):
    make_run(tmp_path / "run")
    shutil.copytree(tmp_path / "run", tmp_path / "noscore")
    (tmp_path / "noscore" / "balancer_score.csv").unlink()
    code, out, err = cli_in_process(capsys, "analyze", str(tmp_path / "noscore"), "--json")
    assert code == 0 and json.loads(out)["summary"]["balancer_solution_score"] is None
    assert "no balancer_score.csv" in err


def test_a_tt_metal_time_under_our_bound_is_flagged_and_said(tmp_path):
    """A matmul whose device time is cut to a tenth of the real one falls under its
    Orojenesis/compute bound: flagged on the row, said once in the notes."""
    pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")
    import pandas as pd

    from opatlas.analyze.sources.ttmetal import COMPUTE_ONLY

    df = pd.read_csv(CSV)
    whole = api.analyze(CSV, extra={"ignore_signposts": True})
    # its matmuls and convs: none under its bound (16 BinaryNg rows are under their DRAM
    # traffic: their shapes say more bytes than 288 GB/s moves in their time)
    bounded = whole.rows[whole.rows["bound_source"].isin(["orojenesis L1", COMPUTE_ONLY])]
    assert len(bounded) == 60 and (bounded["flags"] == "").all()
    already = int(whole.rows["flags"].str.startswith("below bound").sum())
    target = bounded.sort_values("time_s").iloc[-1]
    col = "DEVICE KERNEL DURATION [ns]"
    hit = df[col] == target["device_time_ns"]
    df.loc[hit, col] = df.loc[hit, col] / 10
    path = tmp_path / "ops_perf_results_cut.csv"
    df.to_csv(path, index=False)
    a = api.analyze(path, extra={"ignore_signposts": True})
    low = a.rows[a.rows["flags"].str.startswith("below bound")]
    assert len(low) == int(hit.sum()) + already and (pd.to_numeric(low["headroom"]) < 1).all()
    assert (low["id"] == target["id"]).any()
    [note] = [n for n in a.summary["notes"] if "under their bound" in n or "below" in n]
    assert note.startswith(f"{len(low)} device time(s)")
