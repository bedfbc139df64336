"""Review r2 of tt-metal profiles in `opatlas analyze`: ops that move a whole tensor between
DRAM and L1 (interleaved to sharded and back) bounded by their DRAM side, the simulator's
"not comparable" kept for its estimate; every ratio in --json/--csv a fraction, as for every
source; an empty signpost window said for what it is (reversed, or nothing between)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")

from conftest import cli_in_process, one_error
from opatlas.analyze import api
from opatlas.analyze.sources import ReadOptions, read
from opatlas.analyze.why import OVERHEAD_HEADROOM
from opatlas.errors import OpatlasError
from opatlas.tenstorrent import ttmetal as tm
from test_analyze_ttmetal import tt_perf_report
from test_tt_roofline_fixes import _reshard_csv

REAL = Path(__file__).parent / "data" / "tenstorrent" / "ops_perf_results_2025_09_18_11_39_20.csv"
WHOLE = ReadOptions(extra={"ignore_signposts": True})
I2S, S2I = "InterleavedToShardedDeviceOperation", "ShardedToInterleavedDeviceOperation"
NOT_MODELLED = "not comparable: the simulator models sharded L1 -> sharded L1 reshards"


@pytest.fixture(scope="module")
def whole():
    return read(REAL, options=WHOLE)


# ---------------------------------------------------------------- 1. DRAM <-> L1 moves

def test_interleaved_to_sharded_is_bounded_by_its_dram_input_read_once(whole):
    row = whole.rows.set_index("id").loc[8]  # 491520 x 3 ROW_MAJOR bf16 from DRAM to L1
    assert row["op_code"] == I2S
    assert row["dram_traffic_bytes"] == 491520 * 3 * 2 == 2_949_120
    assert row["opatlas_bound_ns"] == pytest.approx(2_949_120 / 288) == 10_240
    assert row["bound_source"] == "DRAM traffic: INPUT_0 read once = 2,949,120 B at 288 GB/s"
    # the simulator's reason stays, for its estimate only
    assert pd.isna(row["sim_estimate_ns"]) and row["sim_source"].startswith(NOT_MODELLED)
    # 9.9 ms against 10.24 us: far over its bound, so overhead, as any bounded row
    assert row["headroom"] == pytest.approx(9_900_521 / 10_240)
    assert row["headroom"] > OVERHEAD_HEADROOM and row["limiter"] == "overhead"


def test_sharded_to_interleaved_is_bounded_by_its_dram_output_written_once(whole):
    row = whole.rows.set_index("id").loc[101]
    assert row["op_code"] == S2I
    assert row["bound_source"] == ("DRAM traffic: OUTPUT_0 written once = 1,966,080 B at "
                                   "288 GB/s")
    assert row["opatlas_bound_ns"] == pytest.approx(1_966_080 / 288)
    assert row["headroom"] < OVERHEAD_HEADROOM and row["limiter"] == "memory"


def test_the_27_moves_get_a_bound_or_say_they_are_l1_only(whole):
    moves = whole.rows[whole.rows["op_code"].isin([I2S, S2I])]
    assert len(moves) == 27
    assert not moves["bound_source"].str.startswith("not comparable").any()
    assert moves["sim_source"].str.startswith(NOT_MODELLED).all()
    bounded = moves[moves["opatlas_bound_ns"].notna()]
    assert len(bounded) == 25 and bounded["bound_source"].str.startswith("DRAM traffic").all()
    # the limiter is the bound's: memory, or overhead far over it
    over = bounded["headroom"] > OVERHEAD_HEADROOM
    assert (bounded.loc[over, "limiter"] == "overhead").all()
    assert (bounded.loc[~over, "limiter"] == "memory").all()
    # L1 sharded -> L1 interleaved (lines 22, 27): no DRAM traffic, a move over the NoC
    l1 = moves[moves["opatlas_bound_ns"].isna()].set_index("id")
    assert sorted(l1.index) == [22, 27]
    assert (l1["bound_source"] == tm.NO_BOUND_L1).all()
    assert (l1["limiter"] == "communication").all()
    bounds = whole.summary["bounds"]
    assert (bounds["dram_traffic"], bounds["not_comparable"], bounds["no_bound"]) == (289, 0, 272)


def test_a_reshard_out_of_dram_is_bounded_and_one_in_l1_keeps_its_estimate(tmp_path):
    df = pd.read_csv(REAL, low_memory=False)
    row = df.iloc[[8 - 2]].copy()  # CSV line 8, the DRAM -> L1 move above, as a reshard
    row["OP CODE"] = "ReshardDeviceOperation"
    path = tmp_path / "ops_perf_results_dram_reshard.csv"
    row.to_csv(path, index=False)
    (r,) = read(path).rows.to_dict("records")
    assert r["opatlas_bound_ns"] == pytest.approx(10_240)
    assert r["sim_source"].startswith("not comparable: DEV_1_DRAM_INTERLEAVED -> ")
    assert r["limiter"] == "overhead"
    # an L1 -> L1 reshard the simulator models: its estimate, no bound, over the NoC
    from opatlas.tenstorrent.sim import reshard_time_ns

    sim = reshard_time_ns((1, 1, 256, 256), "4x4", "BLOCK", "2x2", "BLOCK")
    (r,) = read(_reshard_csv(tmp_path, sim)).rows.to_dict("records")
    assert r["sim_estimate_ns"] == pytest.approx(sim) and r["sim_source"] == "wormhole-sim"
    assert r["opatlas_bound_ns"] is None or pd.isna(r["opatlas_bound_ns"])
    assert r["bound_source"] == tm.NO_BOUND_L1 and r["limiter"] == "communication"


# ---------------------------------------------------------------- 2. fractions, one convention

def _keys(value: Any, prefix: str = "") -> list[str]:
    """Every key of a nested summary, dotted."""
    if isinstance(value, dict):
        return [k for key, v in value.items()
                for k in [f"{prefix}{key}", *_keys(v, f"{prefix}{key}.")]]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v, prefix)]
    return []


def test_rows_give_tt_perf_reports_percents_as_fractions(whole, tmp_path):
    theirs = tt_perf_report(REAL, tmp_path / "r.csv", "--ignore-signposts")
    theirs = theirs[~theirs["OP Code"].str.endswith("(signpost)")].set_index("ID")
    ours = whole.rows.set_index("id").loc[theirs.index]
    for mine, col in (("dram_util", "DRAM %"), ("flops_util", "FLOPs %"),
                      ("total_share", "Total %")):
        pct = pd.to_numeric(theirs[col].astype(str).str.rstrip("%"), errors="coerce")
        got = pd.to_numeric(ours[mine], errors="coerce")
        assert (got.isna() == pct.isna()).all(), mine
        assert (got - pct / 100).abs().max() < 1e-3, mine  # their CSV rounds
    assert ours.loc[187, "dram_util"] == pytest.approx(0.4703, abs=1e-4)
    helps = {c.key: c.help for c in whole.columns}
    assert all("as a fraction in --json/--csv" in helps[k]
               for k in ("dram_util", "flops_util", "total_share"))


def test_the_summary_gives_fractions_too_with_names_that_say_so(whole):
    s = whole.summary
    keys = _keys(s)
    assert not [k for k in keys if k.endswith("_pct")] and "percent_keys" not in s
    m = s["merged"]
    # tt-perf-report's overall DRAM %: the device-time-weighted DRAM % of the rows, / 100
    rows = whole.rows
    weighted = (rows["dram_util"].fillna(0) * rows["device_time_ns"]).sum()
    assert m["dram_util"] == pytest.approx(weighted / rows["device_time_ns"].sum())
    assert m["dram_util"] == pytest.approx(0.00112, abs=1e-5)  # 0.112 %
    assert m["tracing_could_save_share"] == pytest.approx(
        m["tracing_could_save_us"] / m["total_us"])
    by = pd.DataFrame(s["by_op_code"])
    assert by["device_time_share"].sum() == pytest.approx(1.0)
    assert by["mean_flops_util"].max() <= 1
    top = s["top_ops"][0]
    assert top["device_time_share"] == pytest.approx(
        top["device_time_us"] / (rows["time_s"].sum() * 1e6))


def test_json_output_agrees_with_the_other_sources(capsys):
    code, out, _ = cli_in_process(capsys, "analyze", str(REAL), "--ignore-signposts", "--json")
    assert code == 0
    doc = json.loads(out)
    assert not [k for k in _keys(doc["summary"]) if k.endswith("_pct")]
    assert doc["summary"]["merged"]["dram_util"] < 0.01
    row = next(r for r in doc["rows"] if r["id"] == 187)
    assert row["dram_util"] == pytest.approx(0.4703, abs=1e-4)
    # a ratio column is a fraction under unit "%", as every source's util and share
    units = {c["key"]: c["unit"] for c in doc["columns"]}
    assert units["dram_util"] == units["total_share"] == "%"


# ---------------------------------------------------------------- 3. empty signpost windows

def test_adjacent_signposts_say_nothing_lies_between_not_reversed(capsys):
    flags = {"start_signpost": "Slicing finished", "end_signpost": "OftNet finished"}
    with pytest.raises(OpatlasError) as err:
        api.analyze(REAL, extra=flags)
    assert "before the start one" not in str(err.value)
    assert ("no device operation after 'Slicing finished' until 'OftNet finished' (the two "
            "signposts are adjacent: no device operation lies between them)") in str(err.value)
    code, out, err_text = cli_in_process(capsys, "analyze", str(REAL), "--start-signpost",
                                         "Slicing finished", "--end-signpost",
                                         "OftNet finished", "--json")
    line = one_error(code, err_text, "adjacent", "--ignore-signposts")
    assert "before the start one" not in line and out == ""


def test_reversed_signposts_say_so():
    with pytest.raises(OpatlasError, match=r"\(the end signpost comes before the start one in "
                                           r"the file\)"):
        api.analyze(REAL, extra={"start_signpost": "ResNet module finished",
                                 "end_signpost": "ResNet module started"})


def test_signposts_with_only_signposts_between_say_so(tmp_path):
    df = pd.read_csv(REAL, low_memory=False)
    codes = df["OP CODE"].tolist()
    start, end = codes.index("Head finished"), codes.index("Slicing finished")
    between = df.index[start + 1:end]
    ops = [i for i in between if df.at[i, "OP TYPE"] != "signpost"]
    assert ops and len(between) - len(ops) == 1  # 'Slicing started' stays
    path = tmp_path / "ops_perf_results_no_slicing.csv"
    df.drop(index=ops).to_csv(path, index=False)
    with pytest.raises(OpatlasError, match=r"\(only 1 signpost\(s\) lie between them\)") as err:
        api.analyze(path, extra={"start_signpost": "Head finished",
                                 "end_signpost": "Slicing finished"})
    assert "before the start one" not in str(err.value)


def test_the_reports_detail_tables_show_the_summarys_fractions_as_percents():
    from opatlas.analyze import api
    from opatlas.analyze.tables import detail_tables

    a = api.analyze(REAL, extra={"ignore_signposts": True})
    tables = {t["title"]: t["rows"] for t in detail_tables(a)}
    merged = tables["merged"][0]
    assert "dram_util" not in merged
    assert merged["dram_util (%)"] == pytest.approx(100 * a.summary["merged"]["dram_util"])
    shares = [r["device_time_share (%)"] for r in tables["by op code"]]
    assert sum(shares) == pytest.approx(100.0)
