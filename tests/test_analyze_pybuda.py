"""PyBuda inputs of `opatlas analyze`: the netlist as PyBuda's perf analyzer reads it, a run
folder with every §B.2 figure checked by hand, the netlist-only estimate and reblocking, and
bad input. The run's CSVs are built here with the §B.1 columns (no public run left them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from opatlas.analyze.model import Analysis
from opatlas.analyze.sources import ReadOptions, detect, read
from opatlas.errors import OpatlasError
from opatlas.tenstorrent.netlist import load_netlist
from opatlas.tenstorrent.opmodel import matmul_check
from opatlas.tenstorrent.pybuda_estimate import overlap
from opatlas.tenstorrent.reblock import reblock

TT = Path(__file__).parent / "data" / "tenstorrent"
RESNET = TT / "resnet50_hifi3_fp16b.netlist.yaml"
BERT = TT / "bert_large_train_encoders.netlist.yaml"

Q = {"entries": 64, "grid_size": [1, 1], "t": 1, "ublock_order": "r", "df": "Float16_b",
     "target_device": 0, "tile_dim": [32, 32]}
NETLIST = {
    "devices": {"arch": "wormhole_b0"},
    "queues": {
        "act": {"input": "HOST", "type": "queue", **Q, "mblock": [4, 8], "ublock": [2, 1],
                "loc": "dram", "dram": [[0, 0]]},
        "w": {"input": "HOST", "type": "ram", **Q, "mblock": [8, 4], "ublock": [1, 2],
              "loc": "dram", "dram": [[1, 0]]},
        "e2e": {"input": "mm0", "type": "queue", **Q, "mblock": [8, 8], "ublock": [1, 1],
                "loc": "dram", "dram": [[2, 0]]},
        "bias": {"input": "HOST", "type": "ram", **Q, "mblock": [1, 1], "ublock": [2, 2],
                 "loc": "dram", "dram": [[3, 0]]},
        "out": {"input": "add0", "type": "queue", **Q, "mblock": [1, 1], "ublock": [2, 2],
                "loc": "host", "host": [[0, 0]]},
    },
    "graphs": {
        "fwd_0_0_temporal_epoch_0": {
            "target_device": 0, "input_count": 64,
            "mm0": {"type": "matmul", "grid_loc": [0, 0], "grid_size": [2, 2], "t": 1,
                    "mblock": [2, 2], "ublock": [2, 2], "inputs": ["act", "w"],
                    "in_df": ["Float16_b", "Float16_b"], "out_df": "Float16_b",
                    "math_fidelity": "HiFi3", "attributes": {"m_k": 4, "u_kt": 2}},
            "gelu0": {"type": "gelu", "grid_loc": [2, 0], "grid_size": [1, 2], "t": 1,
                      "mblock": [4, 2], "ublock": [2, 2], "inputs": ["mm0"],
                      "in_df": ["Float16_b"], "out_df": "Float16_b",
                      "math_fidelity": "HiFi3"},
        },
        "fwd_0_1_temporal_epoch_1": {
            "target_device": 0, "input_count": 64,
            "add0": {"type": "add", "grid_loc": [0, 0], "grid_size": [1, 1], "t": 1,
                     "mblock": [1, 1], "ublock": [2, 2], "inputs": ["e2e", "bias"],
                     "in_df": ["Float16_b", "Float16_b"], "out_df": "Float16_b",
                     "math_fidelity": "HiFi3"},
        },
    },
    "programs": [{"run_fwd_0": [
        {"param": ["$p_loop_count"]},
        {"execute": {"graph_name": "fwd_0_0_temporal_epoch_0", "queue_settings": {
            "act": {"prologue": False, "epilogue": False, "zero": False},
            "w": {"prologue": True, "epilogue": False, "zero": False}}}},
        {"execute": {"graph_name": "fwd_0_1_temporal_epoch_1", "queue_settings": {
            "e2e": {"prologue": False, "epilogue": False, "zero": False},
            "bias": {"prologue": True, "epilogue": False, "zero": False}}}},
    ]}],
}

PERF_HEADER = ["global_epoch_ids", "program_names", "graph_name", "warnings", "op_name",
               "first_to_last_input", "grid_size", "kernel_total_runtime",
               "kernel_runtime_per_input", "model_runtime_per_input", "kernel_math_utilization",
               "model_math_utilization", "bw_limited_factor", "slowest_operand",
               "bw_bound_total_runtime", "bw_bound_runtime_per_input",
               "bw_bound_math_utilization", "output_pipe_bw_0", "required_output_pipe_bw_0"]
for _i in range(8):
    PERF_HEADER += [f"input_pipe_bw_{_i}", f"required_input_bw_{_i}"]


def _perf_row(name: str, first_last: str, kernel_total: int, util: float, bw_total: int,
              bw_util: float, out: tuple[float, float], ins: list[tuple[str, str]]) -> list[str]:
    row = {"op_name": name, "first_to_last_input": first_last, "graph_name": "g",
           "kernel_total_runtime": str(kernel_total), "kernel_math_utilization": str(util),
           "bw_bound_total_runtime": str(bw_total), "bw_bound_math_utilization": str(bw_util),
           "output_pipe_bw_0": str(out[0]), "required_output_pipe_bw_0": str(out[1])}
    for i, (actual, required) in enumerate(ins):
        row[f"input_pipe_bw_{i}"], row[f"required_input_bw_{i}"] = actual, required
    return [row.get(h, "N/A") for h in PERF_HEADER]


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n")


def make_run(folder: Path, with_estimates: bool = True) -> Path:
    """A run folder: netlist, two epochs of backend perf reports, op_perf.csv (header with
    PyBuda's leading spaces), balancer_score.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    netlist = folder / "model_netlist.yaml"
    netlist.write_text(yaml.safe_dump(NETLIST, sort_keys=False))
    res = folder / "perf_results" / "analyzer_results"
    # epoch 0: mm0 first and NOT the slowest (the original's max() would return it)
    _write_csv(res / "fwd_0_0_temporal_epoch_0" / "graph_perf_report.csv", PERF_HEADER, [
        _perf_row("mm0", "0->63", 640000, 60.0, 800000, 48.0, (30, 20),
                  [("10", "25"), ("40", "20")]),
        _perf_row("gelu0", "0->63", 320000, 30.0, 960000, 10.0, (8, 24), [("20", "30")]),
    ])
    # epoch 1 under the older fwd_0_<e> folder name; one required bandwidth reads N/A
    _write_csv(res / "fwd_0_1" / "graph_perf_report.csv", PERF_HEADER, [
        _perf_row("add0", "0->31", 64000, 20.0, 64000, 20.0, (10, 5),
                  [("10", "5"), ("0", "N/A")]),
    ])
    if with_estimates:
        header = ["name", " type", " epoch", " grid", " tiles", " cycles", " limiter_cycles"]
        header += [f" estimated_input_bw_{i}" for i in range(8)] + [" estimated_output_bw_0"]
        pad = ["0"] * 9
        _write_csv(folder / "op_perf.csv", header, [
            ["mm0", " matmul", " 0", " 2x2", " 64", " 9000", " 13000", *pad],
            ["gelu0", " gelu", " 0", " 1x2", " 64", " 6000", " 11000", *pad],
            ["add0", " add", " 1", " 1x1", " 4", " 2000", " 2500", *pad],
        ])
        _write_csv(folder / "balancer_score.csv", ["epoch", " score"],
                   [["0", " 58.5"], ["1", " 400.0"], ["total", " 55.0"]])
    return netlist


# ---------------------------------------------------------------- netlist parsing (§B.1)

def test_real_netlists_parse_as_the_perf_analyzer_does():
    nl = load_netlist(RESNET)
    assert (len(nl.all_ops()), nl.arch, nl.device_count) == (240, "wormhole_b0", 1)
    assert nl.temporal == list(range(10))
    assert nl.core_count == 72  # Wormhole's assumed [9, 8]; no op reaches past it
    first = nl.ops["fwd_0_0_temporal_epoch_0"][
        "conv2d_0.dc.conv2d.3.dc.conv2d.1.dc.sparse_matmul.9.dc.sparse_matmul.1.lc2"]
    # pixel_values is read without prologue (DRAM); the lc.* constants are prologue
    assert first.input_is_dram == [False, True, False]
    assert first.grid == (7, 1) and first.m_k == 2 and first.u_kt == 196 and first.is_sparse
    assert nl.ops["fwd_0_9_temporal_epoch_9"]["add_759"].output_is_dram  # feeds the output q
    bert = load_netlist(BERT)
    assert len(bert.all_ops()) == 381
    passes = {op.pass_ for op in bert.all_ops()}
    assert passes == {"fwd", "bwd"}


def test_synthetic_netlist_dram_flags_follow_the_original(tmp_path):
    nl = load_netlist(make_run(tmp_path))
    mm0, gelu0 = nl.ops["fwd_0_0_temporal_epoch_0"]["mm0"], nl.ops[
        "fwd_0_0_temporal_epoch_0"]["gelu0"]
    assert mm0.input_is_dram == [True, False]  # act non-prologue, w prologue
    assert mm0.output_is_dram  # mm0 writes the e2e queue
    # the original counts every queue producer as DRAM in every graph, so gelu0's input mm0
    # (an op of its own epoch) is flagged DRAM too
    assert gelu0.input_is_dram == [True]
    assert nl.core_count == 72 and nl.device_count == 1


# ---------------------------------------------------------------- a run folder (§B.2)

def test_run_folder_figures_by_hand(tmp_path):
    make_run(tmp_path)
    assert detect(tmp_path).name == "pybuda"
    a = read(tmp_path)
    s = a.summary
    e0, e1 = s["epoch_summary"]
    # epoch 0: kernel singles 640000/64 = 10000 and 320000/64 = 5000; bw 12500 and 15000
    assert e0["slowest_op"] == "gelu0"  # the largest bw time, not the first op
    assert e0["pipeline_cycles"] == 15000
    assert e0["inputs_per_second"] == 66666  # int(1e9 / 15000)
    # math util: (4·48·12500 + 2·10·15000) / 15000 / 72 = 2.5
    assert e0["math_util"] == 2.5 and "util" not in e0
    # balancer util: (4·9000 + 2·6000) / 13000 / 72 = 0.05128 -> 5.1 %
    assert e0["balancer_util"] == 5.1
    assert e0["matmul_cores"] == 4
    # DRAM pipes: mm0 in0 (25/10), mm0 out (20/30), gelu0 in0 (30/20, flagged DRAM as above);
    # NoC: mm0 in1 (20/40), gelu0 out (24/8); at 1 GHz, B/cycle = GB/s
    assert (e0["required_dram_bw_gbs"], e0["actual_dram_bw_gbs"]) == (75.0, 60.0)
    assert (e0["required_noc_bw_gbs"], e0["actual_noc_bw_gbs"]) == (44.0, 48.0)
    assert e0["sum_estimated_kernel_err"] == 2000  # |9000-10000| + |6000-5000|
    assert e0["sum_estimated_lim_err"] == 4500  # |13000-12500| + |11000-15000|
    assert e0["balancer_epoch_score"] == 58.5
    # epoch 1: add0, 32 inputs: 64000/32 = 2000 for both
    assert (e1["pipeline_cycles"], e1["inputs_per_second"]) == (2000, 500000)
    assert e1["math_util"] == 0.2  # 1·20·2000 / 2000 / 72 = 0.277 -> 0.2
    assert e1["balancer_util"] == 1.1  # 1·2000 / 2500 / 72 = 0.0111 -> 1.1 %
    assert (e1["required_dram_bw_gbs"], e1["actual_dram_bw_gbs"]) == (10.0, 20.0)
    # model: 1e9 / (15000 + 2000)
    assert s["overall_speed"] == 58823
    assert s["overall_util"] == 2.22  # (2.5·15000 + 0.2·2000) / 17000 = 2.229
    # 2000 / 17000 = 11 %, said once: as the views' (absolute) estimation error
    assert s["estimation_error"] == pytest.approx(0.11) and "kernel_estimation_error" not in s
    assert s["kernel_bw_estimation_error"] == 16  # 5000 / 29500
    assert s["balancer_solution_score"] == 55.0
    assert (s["epochs"], s["ops"]) == (2, 3)


def test_run_folder_rows_columns_and_highlights(tmp_path):
    make_run(tmp_path)
    a = read(tmp_path)
    rows = a.rows.set_index("op")
    assert list(a.rows["op"]) == ["gelu0", "mm0", "add0"]  # slowest first within an epoch
    mm0, gelu0, add0 = rows.loc["mm0"], rows.loc["gelu0"], rows.loc["add0"]
    assert (mm0["kernel_cycles"], mm0["bw_kernel_cycles"]) == (10000, 12500)
    assert mm0["time_s"] == pytest.approx(12500e-9)
    assert mm0["bound_time_s"] == pytest.approx(6144e-9)  # its HiFi3 math floor
    # in0 factor 25/10 = 2.5 > in1 0.5 and out 20/30: a queue input -> dram in0
    assert mm0["bw_problem"] == "dram in0" and mm0["limiter"] == "memory"
    # gelu0: in0 30/20 = 1.5 < out 24/8 = 3 -> output; its output goes to an op (NoC)
    assert gelu0["bw_problem"] == "output" and gelu0["limiter"] == "communication"
    # no pipe short, and its only bound is its DRAM traffic (no FLOPs): memory, not compute
    assert add0["bw_problem"] == "" and add0["limiter"] == "memory"
    assert add0["in1_req"] == 0.0  # N/A reads as 0
    assert mm0["est_err"] == pytest.approx(0.10) and gelu0["est_err"] == pytest.approx(0.20)
    assert mm0["util"] == pytest.approx(0.60) and mm0["bw_util"] == pytest.approx(0.48)
    assert mm0["headroom"] == pytest.approx(12500 / 6144)  # bw_kernel / math floor
    assert mm0["m/u_kt"] == "4/2" and "bad m_k/u_kt" in mm0["flags"]
    assert "in0 below required" in mm0["flags"] and "out below required" in gelu0["flags"]
    assert mm0["flops"] == 2 * (2 * 2 * 2 * 32) * (4 * 2 * 32) * (2 * 2 * 2 * 32)
    assert mm0["grid"] == "2x2" and mm0["epoch"] == 0 and add0["epoch"] == 1
    (edge,) = a.summary["reblocking"]  # the netlist's report comes with the run's figures
    assert (edge["producer"], edge["consumer"], edge["fan_in"]) == ("mm0", "gelu0", 2)
    assert gelu0["max_fan_in"] == 2
    assert a.group_label == "epoch" and a.groups() == [0, 1]
    keys = {c.key for c in a.columns}
    assert {"estimated_cycles", "kernel_cycles", "bw_kernel_cycles", "bw_problem"} <= keys
    roles = {c.key: c.role for c in a.columns}
    assert roles["util"] == "util" and roles["est_err"] == "error"
    assert a.summary["throughput"] == 58823 and a.summary["utilization"] == pytest.approx(0.0222)
    assert a.summary["estimation_error"] == pytest.approx(0.11)


def test_run_without_op_perf_hides_estimates(tmp_path):
    make_run(tmp_path, with_estimates=False)
    a = read(tmp_path)
    assert "estimated_cycles" not in {c.key for c in a.columns}
    assert a.summary["estimation_error"] is None
    assert a.summary["epoch_summary"][0]["balancer_util"] is None
    assert a.summary["overall_speed"] == 58823


def test_save_load_round_trip(tmp_path):
    make_run(tmp_path / "run")
    a = read(tmp_path / "run")
    b = Analysis.load(a.save(tmp_path / "a.json"))
    assert b.summary["overall_speed"] == a.summary["overall_speed"]
    assert b.rows["bw_kernel_cycles"].tolist() == a.rows["bw_kernel_cycles"].tolist()
    assert b.group_label == "epoch"


def test_netlist_path_with_dir_option(tmp_path):
    netlist = make_run(tmp_path / "run")
    moved = tmp_path / "elsewhere" / "model_netlist.yaml"
    moved.parent.mkdir()
    moved.write_text(netlist.read_text())
    a = read(moved, "pybuda", ReadOptions(extra={"dir": tmp_path / "run"}))
    assert a.summary["mode"] == "measured" and a.summary["overall_speed"] == 58823


# ---------------------------------------------------------------- the netlist alone (§B.4)

def test_netlist_estimate_by_hand(tmp_path):
    netlist = make_run(tmp_path / "run")
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "model_netlist.yaml").write_text(netlist.read_text())
    a = read(alone / "model_netlist.yaml")
    assert a.summary["mode"] == "estimate"
    rows = a.rows.set_index("op")
    mm0, add0 = rows.loc["mm0"], rows.loc["add0"]
    # matmul V2, Float16_b base params, HiFi3: 384·15.516 + 48·47.701 + 16·93.197 + 192·3.333
    assert mm0["estimated_cycles"] == 10378
    assert mm0["theoretical_cycles"] == 6144  # 1·4·2·2·2·2·2·3·16
    # reads: act 32 tiles·2048 B / (20.4/2) B/cycle = 6426 < kernel; w is prologue
    assert mm0["estimated_lim_cycles"] == 10378 and mm0["limiter"] == "compute"
    # add: 234.254 + 4·49.602·2 (Float16_b) = 631; e2e read 8192 B / 10.2 = 804
    assert add0["estimated_cycles"] == 631
    assert add0["estimated_lim_cycles"] == 804 and add0["bw_problem"] == "dram in0"
    e1 = a.summary["epoch_summary"][1]
    assert (e1["pipeline_cycles"], e1["inputs_per_second"]) == (804, 1243781)
    # reblocking mm0 (2x2 grid, 8x8 tiles) -> gelu0 (1x2): each gelu0 core gathers 2 cores
    (edge,) = a.summary["reblocking"]
    assert (edge["producer"], edge["consumer"], edge["fan_in"], edge["gathered"]) == (
        "mm0", "gelu0", 2, 2.0)
    ref = reblock(8, 8, (2, 2), (2, 1)).predicted_ns  # opatlas reblock, columns x rows
    assert edge["predicted_ns"] == pytest.approx(ref)
    assert rows.loc["gelu0", "max_fan_in"] == 2


def test_overlap_matches_the_guides_example():
    # 7x1 producer feeding a 2x1 consumer: 3.5 producers' worth, spread over 4 cores
    assert overlap(14, 7, 2) == 4
    assert overlap(8, 2, 2) == 1 and overlap(8, 2, 1) == 2 and overlap(12, 3, 2) == 2


def test_opmodel_check_against_measured_matmuls():
    c = matmul_check()
    assert c["rows"] == 334
    assert 0 < c["median_abs_error_pct"] < c["mean_abs_error_pct"] < c["max_abs_error_pct"]
    assert c["mean_abs_error_pct"] < 15  # the fitted model is within ~8% on average


def test_real_netlists_estimate_every_epoch():
    for path, ops in ((RESNET, 240), (BERT, 381)):
        a = read(path)
        assert len(a.rows) == ops and a.summary["epochs"] == 10
        cycles = [e["pipeline_cycles"] for e in a.summary["epoch_summary"]]
        assert all(c > 0 for c in cycles)
        assert a.summary["overall_speed"] == int(1e9 / sum(cycles))
        for e, c in zip(a.summary["epoch_summary"], cycles, strict=True):
            epoch_rows = a.rows[a.rows["epoch"] == e["epoch"]]
            assert epoch_rows["estimated_lim_cycles"].max() == c


# ---------------------------------------------------------------- bad input

def test_netlist_missing_a_section(tmp_path):
    bad = dict(NETLIST)
    del bad["programs"]
    p = tmp_path / "bad_netlist.yaml"
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(OpatlasError, match=r"bad_netlist\.yaml.*programs"):
        read(p)


def test_perf_report_with_wrong_header(tmp_path):
    make_run(tmp_path)
    f = tmp_path / "perf_results" / "analyzer_results" / "fwd_0_1" / "graph_perf_report.csv"
    f.write_text("op_name,kernel\nadd0,5\n")
    with pytest.raises(OpatlasError, match=r"graph_perf_report\.csv.*first_to_last_input"):
        read(tmp_path)


def test_folder_with_no_netlist_or_two(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(OpatlasError, match="holds no PyBuda netlist"):
        read(tmp_path / "empty", "pybuda")
    make_run(tmp_path / "two")
    (tmp_path / "two" / "other_netlist.yaml").write_text("devices: {}\n")
    with pytest.raises(OpatlasError, match=r"holds 2 netlists.*-n/--netlist"):
        read(tmp_path / "two")


def test_measured_op_missing_from_netlist(tmp_path):
    make_run(tmp_path)
    f = tmp_path / "perf_results" / "analyzer_results" / "fwd_0_1" / "graph_perf_report.csv"
    f.write_text(f.read_text().replace("add0", "ghost"))
    with pytest.raises(OpatlasError, match=r"'ghost'.*different runs"):
        read(tmp_path)


def test_fast_yaml_parses_netlists_as_pyyaml_does():
    yaml_rs = pytest.importorskip("yaml_rs", reason="yaml-rs is in the opatlas[tt] extra")
    for path in (RESNET, BERT):
        text = path.read_text()
        assert yaml_rs.loads(text, parse_datetime=False) == yaml.load(
            text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def test_invalid_yaml_is_one_paragraph(tmp_path):
    p = tmp_path / "broken_netlist.yaml"
    p.write_text("graphs: {a: [1, 2\nqueues: ]\n")
    with pytest.raises(OpatlasError, match=r"broken_netlist\.yaml is not a usable PyBuda "
                                           r"netlist: it is not valid YAML"):
        load_netlist(p)


def test_two_chips_one_temporal_epoch(tmp_path):
    """Two spatial graphs (one per chip) of temporal epoch 0 run at the same time: merged into
    one epoch whose cores are both chips'; with -s they are two epochs of one chip each."""
    doc = yaml.safe_load(yaml.safe_dump(NETLIST))
    g0 = doc["graphs"].pop("fwd_0_0_temporal_epoch_0")
    g1 = doc["graphs"].pop("fwd_0_1_temporal_epoch_1")
    g1["target_device"] = 1
    doc["graphs"] = {"fwd_0_0_temporal_epoch_0": g0, "fwd_0_1_temporal_epoch_0": g1}
    for ins in doc["programs"][0]["run_fwd_0"]:
        if "execute" in ins and ins["execute"]["graph_name"].endswith("epoch_1"):
            ins["execute"]["graph_name"] = "fwd_0_1_temporal_epoch_0"
    make_run(tmp_path)
    (tmp_path / "model_netlist.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    nl = load_netlist(tmp_path / "model_netlist.yaml")
    assert nl.temporal == [0, 0] and nl.device_count == 2
    res = tmp_path / "perf_results" / "analyzer_results"
    (res / "fwd_0_1").rename(res / "fwd_0_1_temporal_epoch_0")
    merged = read(tmp_path).summary
    assert merged["epochs"] == 1 and merged["epoch_summary"][0]["ops"] == 3
    e = merged["epoch_summary"][0]
    assert e["pipeline_cycles"] == 15000  # gelu0 still the slowest
    # (4·48·12500 + 2·10·15000 + 1·20·2000) / 15000 / (72·2 cores) = 1.268 -> 1.2
    assert e["math_util"] == 1.2
    spatial = read(tmp_path, options=ReadOptions(extra={"spatial_epochs": True})).summary
    assert spatial["epochs"] == 2 and spatial["epoch_kind"] == "spatial"
    assert spatial["epoch_summary"][0]["math_util"] == 2.5  # 72 cores: one chip
    assert spatial["overall_speed"] == 58823  # 1e9 / (15000 + 2000)


def test_op_perf_with_wrong_header_and_strict(tmp_path):
    make_run(tmp_path / "run")
    (tmp_path / "run" / "op_perf.csv").write_text("name, kind\nmm0, matmul\n")
    with pytest.raises(OpatlasError, match=r"op_perf\.csv.*cycles, limiter_cycles, tiles"):
        read(tmp_path / "run")
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "model_netlist.yaml").write_text((tmp_path / "run" / "model_netlist.yaml")
                                              .read_text())
    with pytest.raises(OpatlasError, match="--strict asks for measured results"):
        read(alone, options=ReadOptions(strict=True))


def test_grayskull_runs_are_read_but_not_estimated(tmp_path):
    netlist = make_run(tmp_path / "run")
    netlist.write_text(netlist.read_text().replace("wormhole_b0", "grayskull"))
    s = read(tmp_path / "run").summary
    assert s["overall_speed"] == int(1.2e9 / 17000)  # Grayskull's 1.2 GHz clock
    assert s["core_count"] == 110  # its assumed [11, 10] grid
    (tmp_path / "elsewhere").mkdir()  # a run folder without perf results: the estimate
    with pytest.raises(OpatlasError, match="Wormhole B0 only, not grayskull"):
        read(netlist, options=ReadOptions(extra={"dir": tmp_path / "elsewhere"}))
    with pytest.raises(OpatlasError, match=r"--dir .*nowhere: no such file or folder"):
        read(netlist, options=ReadOptions(extra={"dir": tmp_path / "nowhere"}))
