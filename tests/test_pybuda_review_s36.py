"""Review fixes (session 36) of `opatlas analyze` on PyBuda runs and netlists: a netlist op the
perf report has no row for is said and refused under --strict; a short row is an error by file
and line; a math utilization outside 0..100 is named (a note --strict refuses); the kernel
estimate error is shown once, with no sign, labelled absolute; the per-epoch util is named by
what it is (math util measured, balancer util estimated); an assumed fidelity is refused under
--strict in both modes; a kernel-limited op without a compute floor is not called "compute".
The run is test_analyze_pybuda's synthetic one, its files cut or edited per test."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import cli_in_process, one_error
from opatlas.analyze.html import render as render_html
from opatlas.analyze.sources import ReadOptions, read
from opatlas.analyze.sources.pybuda import estimate_analysis, kernel_verdict, measured_analysis
from opatlas.analyze.tables import detail_tables, group_util_label, summary_items
from opatlas.errors import OpatlasError
from opatlas.tenstorrent.pybuda_run import load_graph_perf
from test_analyze_pybuda import make_run

G = Path("perf_results") / "analyzer_results" / "fwd_0_0_temporal_epoch_0" / \
    "graph_perf_report.csv"
STRICT = ReadOptions(strict=True)


def _cut(path: Path, nbytes: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-nbytes])


def _edit_cell(path: Path, op: str, column: str, value: str) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    i = header.index(column)
    for n, line in enumerate(lines[1:], 1):
        cells = line.split(",")
        if cells[header.index("op_name")] == op:
            cells[i] = value
            lines[n] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- 5. missing or cut rows

def test_a_netlist_op_without_a_measured_row_is_said_and_refused_under_strict(tmp_path, capsys):
    make_run(tmp_path)
    report = tmp_path / G
    head, mm0, _gelu0 = report.read_text().splitlines()
    report.write_text(f"{head}\n{mm0}\n")  # a clean cut: gelu0's whole row gone
    a = read(tmp_path)
    (note,) = [n for n in a.summary["notes"] if "no row in its perf report" in n]
    assert "gelu0" in note and str(report) in note and "epoch 0" in note
    # the figures still come (without gelu0), but never silently
    assert a.summary["epoch_summary"][0]["slowest_op"] == "mm0"
    with pytest.raises(OpatlasError, match=r"gelu0.*--strict refuses"):
        read(tmp_path, options=STRICT)
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path), "--json")
    assert code == 0 and "opatlas: note:" in err and "gelu0" in err
    code, out, err = cli_in_process(capsys, "analyze", str(tmp_path), "--json", "--strict")
    assert code == 2 and not out
    one_error(code, err, "gelu0", "--strict refuses")


def test_a_complete_run_has_no_unmeasured_note(tmp_path):
    make_run(tmp_path)
    a = read(tmp_path, options=STRICT)  # nothing in doubt: --strict takes it
    assert not any("no row in its perf report" in n for n in a.summary["notes"])


@pytest.mark.parametrize("nbytes", [60, 150])
def test_a_cut_report_is_an_error_naming_the_file_and_line(tmp_path, nbytes):
    """The reviewer's cuts: 60 bytes leave gelu0's row short (its cells read as 0 before),
    150 leave mm0's row one field short and gelu0's row gone (gelu0 vanished before)."""
    make_run(tmp_path)
    _cut(tmp_path / G, nbytes)
    with pytest.raises(OpatlasError) as err:
        read(tmp_path)
    line = 3 if nbytes == 60 else 2
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / G} line {line}: ")
    assert "where the header has 35" in msg and "cut short" in msg


def test_a_short_row_is_refused_by_load_graph_perf(tmp_path):
    make_run(tmp_path)
    report = tmp_path / G
    head, mm0, gelu0 = report.read_text().splitlines()
    short = ",".join(gelu0.split(",")[:-3])
    report.write_text(f"{head}\n{mm0}\n{short}\n")
    with pytest.raises(OpatlasError, match=r"line 3: 32 field\(s\) where the header has 35"):
        load_graph_perf(report)


def test_a_row_with_extra_cells_is_refused_but_a_trailing_blank_is_not(tmp_path):
    make_run(tmp_path)
    report = tmp_path / G
    head, mm0, gelu0 = report.read_text().splitlines()
    report.write_text(f"{head}\n{mm0},\n{gelu0}\n")  # a trailing comma: a blank extra cell
    assert [r["op_name"] for r in load_graph_perf(report)] == ["mm0", "gelu0"]
    report.write_text(f"{head}\n{mm0},7\n{gelu0}\n")
    with pytest.raises(OpatlasError, match=r"line 2: 36 fields .* do not line up"):
        load_graph_perf(report)


def test_an_na_cell_in_a_whole_row_still_reads_as_zero(tmp_path):
    make_run(tmp_path)  # add0's required_input_bw_1 is N/A, its row whole
    rows = read(tmp_path).rows.set_index("op")
    assert rows.loc["add0", "in1_req"] == 0.0


def test_a_short_op_perf_row_is_an_error_not_a_traceback(tmp_path, capsys):
    make_run(tmp_path)
    op_perf = tmp_path / "op_perf.csv"
    lines = op_perf.read_text().splitlines()
    lines[-1] = ",".join(lines[-1].split(",")[:5])  # add0 cut before its cycles
    op_perf.write_text("\n".join(lines) + "\n")
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path), "--json")
    one_error(code, err, f"{op_perf} line 4", "where the header has 16")


@pytest.mark.parametrize("column, value", [("bw_bound_math_utilization", "480"),
                                           ("kernel_math_utilization", "-3")])
def test_a_utilization_outside_0_100_is_named_and_refused_under_strict(tmp_path, column,
                                                                       value):
    make_run(tmp_path)
    _edit_cell(tmp_path / G, "mm0", column, value)
    a = read(tmp_path)
    (note,) = [n for n in a.summary["notes"] if "outside 0-100" in n]
    assert str(tmp_path / G) in note and "line 2" in note and "op mm0" in note
    assert f"{column} {value}" in note
    with pytest.raises(OpatlasError, match=rf"op mm0, {column} {value}.*--strict refuses"):
        read(tmp_path, options=STRICT)


def test_utilizations_of_0_and_100_are_in_range(tmp_path):
    make_run(tmp_path)
    _edit_cell(tmp_path / G, "mm0", "bw_bound_math_utilization", "100")
    _edit_cell(tmp_path / G, "gelu0", "kernel_math_utilization", "0")
    read(tmp_path, options=STRICT)


# ---------------------------------------------------------------- 9. the estimate error

def test_kernel_estimate_error_is_shown_once_without_a_sign(tmp_path, capsys):
    make_run(tmp_path)
    a = read(tmp_path)
    items = summary_items(a)
    errors = [(label, value) for label, value, _ in items if "estimat" in label
              and "bw" not in label]
    assert errors == [("mean |kernel estimate error|", "11.0%")]
    assert "kernel_estimation_error" not in a.summary
    assert a.summary["estimation_error"] == pytest.approx(0.11)
    # the plain table prints the same
    code, out, _ = cli_in_process(capsys, "analyze", str(tmp_path))
    assert code == 0 and "mean |kernel estimate error|: 11.0%" in out
    assert "+11" not in out and "kernel estimation error" not in out


# ---------------------------------------------------------------- 10. the epoch util

def test_measured_and_estimated_epoch_utils_carry_different_names(tmp_path):
    netlist = make_run(tmp_path / "run")
    alone = tmp_path / "alone" / "model_netlist.yaml"
    alone.parent.mkdir()
    alone.write_text(netlist.read_text())
    measured, estimated = read(tmp_path / "run"), read(alone)
    m0, e0 = measured.summary["epoch_summary"][0], estimated.summary["epoch_summary"][0]
    assert "util" not in m0 and "util" not in e0
    assert m0["math_util"] == 2.5 and m0["balancer_util"] == 5.1  # op_perf.csv's cycles
    assert "math_util" not in e0 and e0["balancer_util"] is not None
    # the views' group util is the mode's own, said by the same name
    assert measured.summary["group_util"]["0"] == pytest.approx(0.025)
    assert estimated.summary["group_util"]["0"] == pytest.approx(e0["balancer_util"] / 100)
    assert measured.summary["group_util_label"][0] == "math util"
    assert estimated.summary["group_util_label"][0] == "balancer util"
    assert "no math utilization" in estimated.summary["group_util_label"][1]
    assert "epoch_summary.math_util" in measured.summary["percent_keys"]
    assert estimated.summary["percent_keys"] == ["epoch_summary.balancer_util"]
    # HTML's details and the JSON carry the names
    rows = next(d for d in detail_tables(measured) if d["title"] == "epoch summary")["rows"]
    assert {"math_util (%)", "balancer_util (%)"} <= set(rows[0])
    rows = next(d for d in detail_tables(estimated) if d["title"] == "epoch summary")["rows"]
    assert "balancer_util (%)" in rows[0] and "math_util (%)" not in rows[0]
    doc = json.loads(json.dumps(measured.document()))
    assert doc["summary"]["epoch_summary"][0]["math_util"] == 2.5
    # the label of the list is no summary card of its own
    assert not any("group util" in label for label, _, _ in summary_items(measured))
    labels = [label for label, _, _ in summary_items(measured)]
    assert "approx. math utilization" in labels
    # the group table (terminal and HTML) heads the column with the mode's own name
    assert group_util_label(measured)[0] == "math util"
    assert group_util_label(estimated)[0] == "balancer util"
    assert "<b>balancer util</b>" in render_html(estimated)


# ---------------------------------------------------------------- 11. an assumed fidelity

def _no_fidelity(folder: Path, measured: bool = True) -> Path:
    netlist = make_run(folder) if measured else folder / "model_netlist.yaml"
    if not measured:
        folder.mkdir(parents=True, exist_ok=True)
        make_run(folder.parent / "src")
        netlist.write_text((folder.parent / "src" / "model_netlist.yaml").read_text())
    doc = yaml.safe_load(netlist.read_text())
    del doc["graphs"]["fwd_0_0_temporal_epoch_0"]["mm0"]["math_fidelity"]
    netlist.write_text(yaml.safe_dump(doc, sort_keys=False))
    return netlist


def test_an_assumed_fidelity_is_refused_under_strict_in_a_measured_run(tmp_path, capsys):
    _no_fidelity(tmp_path)
    a = read(tmp_path)
    (note,) = [n for n in a.summary["notes"] if "no math_fidelity" in n]
    assert "(mm0)" in note and "LoFi" in note and "compute peak" in note
    assert "HiFi4" not in note  # a measured run's est is op_perf.csv's, no op model's
    with pytest.raises(OpatlasError, match=r"no math_fidelity \(mm0\).*--strict refuses"):
        read(tmp_path, options=STRICT)
    code, out, err = cli_in_process(capsys, "analyze", str(tmp_path), "--strict", "--json")
    assert code == 2 and not out
    one_error(code, err, "no math_fidelity", "--strict refuses")


def test_an_assumed_fidelity_in_the_netlist_alone_says_why_the_two_differ(tmp_path):
    netlist = _no_fidelity(tmp_path / "alone", measured=False)
    a = read(netlist)
    (note,) = [n for n in a.summary["notes"] if "no math_fidelity" in n]
    assert "(mm0)" in note and "LoFi" in note and "HiFi4" in note
    assert "differ on purpose" in note
    # --strict refuses it (the netlist alone is refused under --strict in any case)
    with pytest.raises(OpatlasError, match=r"no math_fidelity \(mm0\).*--strict refuses"):
        estimate_analysis(netlist, strict=True)
    with pytest.raises(OpatlasError, match="--strict"):
        read(netlist, options=STRICT)


def test_a_stated_fidelity_passes_strict_in_both_modes(tmp_path):
    netlist = make_run(tmp_path / "run")
    measured_analysis(netlist, tmp_path / "run", strict=True)
    estimate_analysis(netlist, strict=True)


# ---------------------------------------------------------------- 14. the limiter's words

def test_an_op_whose_only_bound_is_dram_is_memory_not_compute(tmp_path):
    make_run(tmp_path)
    add0 = read(tmp_path).rows.set_index("op").loc["add0"]
    assert add0["bw_problem"] == "" and pd.isna(add0["theoretical_cycles"])
    assert add0["headroom"] == pytest.approx(4.39, abs=0.01)
    assert add0["limiter"] == "memory"  # read "compute" at 4.39x a DRAM-only bound


def test_kernel_verdict_names_the_bounds_larger_term():
    assert kernel_verdict("compute", 2e-6, 1.5, floor=2e-6) == "compute"
    assert kernel_verdict("compute", 2e-6, 1.5, floor=1e-6) == "memory"  # DRAM the larger
    assert kernel_verdict("compute", 2e-6, 1.5) == "memory"  # no compute floor at all
    assert kernel_verdict("compute", None, None) == "unknown"
    assert kernel_verdict("compute", 2e-6, 11.0) == "overhead"
    assert kernel_verdict("communication", 2e-6, 1.5) == "communication"


def test_a_matmul_with_its_floor_above_its_dram_time_stays_compute(tmp_path):
    make_run(tmp_path)
    # mm0 with no pipe short (bandwidth-bound time = kernel time): its HiFi3 floor (6.1 us)
    # is over its DRAM time (0.9 us)
    _edit_cell(tmp_path / G, "mm0", "bw_bound_total_runtime", "640000")
    mm0 = read(tmp_path).rows.set_index("op").loc["mm0"]
    assert mm0["bw_problem"] == "" and mm0["limiter"] == "compute"
