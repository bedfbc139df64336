"""Review fixes of `opatlas analyze` on a PyBuda run folder: a measured op's bound is the same
roofline as the estimate's (the matmul's math floor at its fidelity, DRAM bytes at the DRAM
peak), never its own measured kernel; an op without a math model and no DRAM traffic is
"unknown"; bad cells and a reversed input span are refused in one line; a missing op_perf.csv
is said. The run is test_analyze_pybuda's synthetic one, a perf report rewritten per test."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import cli_in_process, one_error
from opatlas.analyze.sources import read
from opatlas.devices import tensix_flop_per_cycle
from test_analyze_pybuda import PERF_HEADER, _perf_row, _write_csv, make_run

EPOCH0 = Path("perf_results") / "analyzer_results" / "fwd_0_0_temporal_epoch_0"


def _epoch0(folder: Path, mm0: tuple[str, int, int], gelu0: tuple[str, int, int],
            blank_line: bool = False) -> Path:
    """Epoch 0's report with mm0's and gelu0's (first->last, kernel, bw-bound) totals; a blank
    line before gelu0's row if asked (the error's line is the file's)."""
    rows = [_perf_row("mm0", mm0[0], mm0[1], 60.0, mm0[2], 48.0, (30, 20),
                      [("40", "25"), ("40", "20")]),
            _perf_row("gelu0", gelu0[0], gelu0[1], 30.0, gelu0[2], 10.0, (30, 24),
                      [("30", "30")])]
    path = folder / EPOCH0 / "graph_perf_report.csv"
    _write_csv(path, PERF_HEADER, rows)
    if blank_line:
        head, last = path.read_text().rstrip("\n").rsplit("\n", 1)
        path.write_text(f"{head}\n\n{last}\n")
    return path


def _fast_matmul_run(folder: Path) -> Path:
    """mm0 measured at 4000 cycles per input (256000 over 64 inputs), kernel = bw-bound (no
    pipe short); gelu0 likewise at 5000, with no pipe short either."""
    make_run(folder)
    _epoch0(folder, ("0->63", 256000, 256000), ("0->63", 320000, 320000))
    return folder


# ---------------------------------------------------------------- 1. the measured bound

def test_measured_matmul_bound_is_its_math_floor_and_a_faster_time_is_flagged(tmp_path):
    a = read(_fast_matmul_run(tmp_path))
    mm0 = a.rows.set_index("op").loc["mm0"]
    # the README's rule: FLOPs over cores x 4096 FLOP/cycle / 3 phases (HiFi3) at 1 GHz:
    # 2·256·256·256 / (4 · 1365.33) = 6144 cycles, above the DRAM time (2·64 tiles: 0.91 us)
    floor_s = mm0["flops"] / (mm0["cores"] * tensix_flop_per_cycle("wormhole_b0", "HiFi3")) / 1e9
    assert floor_s == pytest.approx(6144e-9)
    assert mm0["theoretical_cycles"] == 6144
    assert mm0["time_s"] == pytest.approx(4000e-9)
    assert mm0["bound_time_s"] == pytest.approx(floor_s)  # was the 4000 measured: 1.00x
    assert mm0["headroom"] == pytest.approx(4000 / 6144)
    assert "below bound: measured time is 0.65x the bound" in mm0["flags"]
    assert mm0["limiter"] == "compute"
    (note,) = [n for n in a.summary["notes"] if "below their bound" in n]
    assert note.startswith("1 op(s) have a measured time") and "mm0" in note


def test_measured_bound_is_the_estimate_modes_rule(tmp_path):
    """The same op, measured slower than its floor: the same bound as the netlist alone gives,
    and a headroom over 1 (it read 1.25 for any op: bw_kernel over kernel)."""
    netlist = make_run(tmp_path / "run")
    alone = tmp_path / "alone" / "model_netlist.yaml"
    alone.parent.mkdir()
    alone.write_text(netlist.read_text())
    measured = read(tmp_path / "run").rows.set_index("op").loc["mm0"]
    estimated = read(alone).rows.set_index("op").loc["mm0"]
    assert measured["bound_time_s"] == pytest.approx(estimated["bound_time_s"])
    assert measured["bound_time_s"] == pytest.approx(6144e-9)
    assert measured["headroom"] == pytest.approx(12500 / 6144)


def test_elementwise_op_without_dram_traffic_is_unknown_not_compute(tmp_path):
    a = read(_fast_matmul_run(tmp_path))
    gelu0 = a.rows.set_index("op").loc["gelu0"]
    # gelu0: no math model (no FLOP count), input over the NoC, output to an op: no bound
    assert (gelu0["flops"], gelu0["bytes"], gelu0["bw_problem"]) == (0, 0, "")
    assert gelu0["bound_time_s"] is None or gelu0["bound_time_s"] != gelu0["bound_time_s"]
    assert gelu0["headroom"] is None or gelu0["headroom"] != gelu0["headroom"]
    assert gelu0["limiter"] == "unknown"  # was "compute" at 1.00x its own kernel
    assert "below bound" not in gelu0["flags"]


def test_unstated_fidelity_is_said_in_a_measured_run(tmp_path):
    netlist = make_run(tmp_path)
    spec = yaml.safe_load(netlist.read_text())
    del spec["graphs"]["fwd_0_0_temporal_epoch_0"]["mm0"]["math_fidelity"]
    netlist.write_text(yaml.safe_dump(spec, sort_keys=False))
    a = read(tmp_path)
    # LoFi, the FPU's fastest: 6144 / 3 phases
    assert a.rows.set_index("op").loc["mm0", "bound_time_s"] == pytest.approx(2048e-9)
    (note,) = [n for n in a.summary["notes"] if "state no math_fidelity" in n]
    assert "take LoFi" in note and "op model" not in note


# ---------------------------------------------------------------- 2-3. bad reports

def test_non_numeric_cell_is_one_line_naming_file_line_column_value(tmp_path, capsys):
    make_run(tmp_path)
    path = _epoch0(tmp_path, ("0->63", 640000, 800000), ("0->63", 320000, 960000),
                   blank_line=True)
    path.write_text(path.read_text().replace(",30.0,", ",abc,"))  # gelu0's kernel util
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path), "--json")
    one_error(code, err, str(path), "line 4", "column kernel_math_utilization", "'abc'")


def test_negative_run_time_is_refused(tmp_path, capsys):
    make_run(tmp_path)
    path = _epoch0(tmp_path, ("0->63", -640000, 800000), ("0->63", 320000, 960000))
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path), "--json")
    one_error(code, err, str(path), "line 2", "column kernel_total_runtime", "'-640000'",
              "negative")


@pytest.mark.parametrize("name,text,column", [
    ("op_perf.csv", "gelu0, gelu, 0, 1x2, 64, 6000, 11000", "cycles"),
    ("balancer_score.csv", "1, 400.0", "score")])
def test_non_numeric_estimate_or_score_is_one_line(tmp_path, capsys, name, text, column):
    make_run(tmp_path)
    path = tmp_path / name
    path.write_text(path.read_text().replace(text, text.replace(
        "6000" if column == "cycles" else "400.0", "n/a?")))
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path), "--json")
    one_error(code, err, str(path), "line 3", f"column {column}", "'n/a?'")


def test_reversed_input_span_is_refused(tmp_path, capsys):
    make_run(tmp_path)
    path = _epoch0(tmp_path, ("63->0", 640000, 800000), ("0->63", 320000, 960000))
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path), "--json")
    one_error(code, err, str(path), "line 2", "'63->0'", "backwards")


# ---------------------------------------------------------------- 4. a missing op_perf.csv

def test_missing_op_perf_is_said_on_stderr(tmp_path, capsys):
    make_run(tmp_path / "bare", with_estimates=False)
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path / "bare"), "--json")
    assert code == 0
    (line,) = [ln for ln in err.splitlines() if "op_perf.csv" in ln]
    assert line.startswith("opatlas: note:") and "kernel estimation error" in line
    make_run(tmp_path / "full")
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path / "full"), "--json")
    assert code == 0 and "op_perf.csv" not in err
