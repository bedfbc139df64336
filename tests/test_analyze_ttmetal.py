"""tt-metal profiler CSVs in `opatlas analyze`: totals equal Tenstorrent's tt-perf-report run on
the same file (the package itself, as a subprocess), per device and merged, signpost windows,
opatlas's bounds (Orojenesis for matmuls, the reshard simulator), and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")

from conftest import two_device_csv
from opatlas.analyze.model import Analysis
from opatlas.analyze.sources import ReadOptions, detect, read
from opatlas.errors import OpatlasError
from opatlas.tenstorrent import ttmetal as tm

REAL = Path(__file__).parent / "data" / "tenstorrent" / "ops_perf_results_2025_09_18_11_39_20.csv"


def tt_perf_report(csv: Path, out: Path, *flags: str) -> pd.DataFrame:
    """Run Tenstorrent's tool on ``csv`` and read its --csv output."""
    cmd = [sys.executable, "-m", "tt_perf_report.perf_report", str(csv), "--csv", str(out),
           "--no-color", "--no-summary", "--no-advice", *flags]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    return pd.read_csv(out)


def _sum(series: pd.Series) -> float:
    return float(pd.to_numeric(series, errors="coerce").sum())


def test_totals_equal_tt_perf_report_on_the_real_file(tmp_path):
    theirs = tt_perf_report(REAL, tmp_path / "r.csv", "--ignore-signposts")
    a = read(REAL, options=ReadOptions(extra={"ignore_signposts": True}))
    m = a.summary["merged"]
    assert m["device_time_us"] == pytest.approx(_sum(theirs["Device Time"]), rel=1e-12)
    assert m["op_to_op_gap_us"] == pytest.approx(_sum(theirs["Op-to-Op Gap"]), rel=1e-12)
    assert m["signposts"] == 50 and m["device_ops"] == 621
    # per op: the same device time and Bound class, row by row (their ID = our id)
    ours = a.rows.set_index("id")
    theirs = theirs[~theirs["OP Code"].str.endswith("(signpost)")].set_index("ID")
    assert sorted(ours.index) == sorted(theirs.index)
    dev = pd.to_numeric(theirs["Device Time"]) * 1000
    assert (ours.loc[theirs.index, "device_time_ns"] - dev).abs().max() < 1e-6
    assert (ours.loc[theirs.index, "bound"] == theirs["Bound"].fillna("")).all()
    assert a.total_time_s == pytest.approx(m["device_time_us"] / 1e6)
    assert (a.rows["time_s"].sum()) == pytest.approx(a.total_time_s)


def test_signpost_window_as_tt_perf_report(tmp_path):
    flags = {"start_signpost": "ResNet module started", "end_signpost": "ResNet module finished"}
    theirs = tt_perf_report(REAL, tmp_path / "r.csv", "--start-signpost", flags["start_signpost"],
                            "--end-signpost", flags["end_signpost"])
    a = read(REAL, options=ReadOptions(extra=flags))
    assert 0 < len(a.rows) < 621
    assert a.summary["merged"]["device_time_us"] == pytest.approx(_sum(theirs["Device Time"]))
    assert a.summary["merged"]["op_to_op_gap_us"] == pytest.approx(_sum(theirs["Op-to-Op Gap"]))


def test_default_window_after_last_signpost_falls_back_loudly():
    # tt-perf-report's default window (after the last signpost) is empty in this file
    a = read(REAL)
    assert "analysing the whole file" in a.summary["notes"][0]
    assert a.summary["window"] == "whole file (signposts ignored)" and len(a.rows) == 621
    with pytest.raises(OpatlasError, match="nothing follows the last signpost"):
        read(REAL, options=ReadOptions(strict=True))


def test_multi_device_per_device_and_merged(tmp_path):
    path = two_device_csv(REAL, tmp_path)
    theirs = tt_perf_report(path, tmp_path / "r.csv")
    a = read(path)
    assert a.summary["devices"] == [0, 1] and a.groups() == [0, 1]
    per = a.summary["per_device"]
    assert per["1"]["device_time_us"] == pytest.approx(2 * per["0"]["device_time_us"])
    # merged as tt-perf-report merges devices: the slower device's row of each op
    assert a.summary["merged"]["device_time_us"] == pytest.approx(_sum(theirs["Device Time"]))
    assert a.summary["merged"]["device_time_us"] == pytest.approx(per["1"]["device_time_us"])
    assert len(a.rows) == 2 * per["0"]["device_ops"]
    assert not [n for n in a.summary["notes"] if n.startswith("tt-perf-report")]


def test_tt_perf_report_warnings_become_notes(tmp_path):
    path = two_device_csv(REAL, tmp_path)
    df = pd.read_csv(path)
    df.drop(index=df.index[-1]).to_csv(path, index=False)  # device 1 lacks its last op
    a = read(path)
    assert any("Device 1 is missing operation" in n for n in a.summary["notes"])


def test_matmul_bound_is_orojenesis_at_the_cores_l1():
    a = read(REAL, options=ReadOptions(extra={"ignore_signposts": True}))
    mm = a.rows[a.rows["op_code"] == "Matmul"]
    assert len(mm) == 6 and (mm["bound_source"] == "orojenesis L1").all()
    row = mm[mm["op"] == "Matmul 7680 x 128 x 256"].iloc[0]
    # 20 cores of L1 hold the whole problem: traffic is compulsory, 2·(7680·128 + 128·256 +
    # 7680·256) B = 5.96 MB at 288 GB/s = 20.7 us; compute 2·7680·128·256 FLOP at 20 cores ·
    # 74/72 TFLOP/s (HiFi4) = 24.49 us, the larger
    compute_ns = 2 * 7680 * 128 * 256 / (20 * 74 / 72 * 1e12) * 1e9
    assert row["opatlas_bound_ns"] == pytest.approx(compute_ns)
    assert row["flops"] == 2 * 7680 * 128 * 256 and row["limiter"] in ("compute", "memory")
    assert (mm["headroom"] >= 1).all()  # a bound never exceeds the measurement


# an L1 -> L1 block-sharded reshard of a 256x256 bf16 tensor from a 4x4 to a 2x2 grid
SHARD_CFG = ("MemoryConfig(memory_layout=TensorMemoryLayout::BLOCK_SHARDED;buffer_type="
             "BufferType::L1;shard_spec=ShardSpec(grid={{[(x=0;y=0) - (x={x};y={y})]}};"
             "shape={{64; 64}};orientation=ShardOrientation::ROW_MAJOR))")
RESHARD_ROW = {
    "OP CODE": "ReshardDeviceOperation", "INPUT_0_MEMORY": "DEV_0_L1_BLOCK_SHARDED",
    "OUTPUT_0_MEMORY": "DEV_0_L1_BLOCK_SHARDED", "INPUT_0_LAYOUT": "TILE",
    "INPUT_0_DATATYPE": "BFLOAT16",
    "ATTRIBUTES": f"{{'input_mem_config': '{SHARD_CFG.format(x=3, y=3)}'; "
                  f"'output_mem_config': '{SHARD_CFG.format(x=1, y=1)}'}}",
    "INPUT_0_W_PAD[LOGICAL]": "1[1]", "INPUT_0_Z_PAD[LOGICAL]": "1[1]",
    "INPUT_0_Y_PAD[LOGICAL]": "256[256]", "INPUT_0_X_PAD[LOGICAL]": "256[256]"}


def test_reshard_bound_uses_the_simulator_only_where_pinned_down():
    tpr = tm.perf_report_module()
    cfg, row = SHARD_CFG, RESHARD_ROW
    ns, why = tm.reshard_bound(row, tpr.CsvFormat.V2, tpr)
    assert why == "wormhole-sim"
    from opatlas.tenstorrent.sim import reshard_time_ns

    assert ns == pytest.approx(reshard_time_ns((1, 1, 256, 256), "4x4", "BLOCK", "2x2", "BLOCK"))
    only_out = {**row, "ATTRIBUTES": f"{{'output_mem_config': '{cfg.format(x=1, y=1)}'}}"}
    assert tm.reshard_bound(only_out, tpr.CsvFormat.V2, tpr)[0] is None
    a = read(REAL, options=ReadOptions(extra={"ignore_signposts": True}))
    i2s = a.rows[a.rows["op_code"] == "InterleavedToShardedDeviceOperation"]
    assert len(i2s) == 13 and i2s["sim_source"].str.startswith("not comparable").all()
    assert i2s["bound_source"].str.startswith("DRAM traffic").all()


def test_summaries_per_op_code_and_top_ops():
    a = read(REAL, options=ReadOptions(extra={"ignore_signposts": True}))
    by = pd.DataFrame(a.summary["by_op_code"]).set_index("op_code")
    assert by["ops"].sum() == 621
    assert by["device_time_us"].sum() == pytest.approx(a.summary["merged"]["device_time_us"])
    assert by.index[0] == "ReshapeDeviceOperation" and by.loc["Matmul", "ops"] == 6
    top = a.summary["top_ops"]
    assert len(top) == 10 and top[0]["device_time_us"] >= top[-1]["device_time_us"]
    assert top[0]["device_time_us"] == pytest.approx(a.rows["time_s"].max() * 1e6)
    m = a.summary["merged"]
    assert m["high_gap_ops"] > 0 and 0 < m["tracing_could_save_us"] < m["op_to_op_gap_us"]


def test_detect_save_load_and_bad_header(tmp_path):
    assert detect(REAL).name == "ttmetal"
    a = read(REAL, options=ReadOptions(extra={"ignore_signposts": True}))
    b = Analysis.load(a.save(tmp_path / "a.json"))
    assert b.rows["device_time_ns"].sum() == pytest.approx(a.rows["device_time_ns"].sum())
    bad = tmp_path / "ops_perf_results_bad.csv"
    bad.write_text("OP,TYPE\nMatmul,x\n")
    with pytest.raises(OpatlasError, match=r"ops_perf_results_bad\.csv.*DEVICE KERNEL DURATION"):
        read(bad)


def test_unknown_signpost_is_an_error():
    with pytest.raises(OpatlasError, match=r"no signpost 'Nope' \(its signposts: OftNet module "):
        read(REAL, options=ReadOptions(extra={"start_signpost": "Nope"}))
