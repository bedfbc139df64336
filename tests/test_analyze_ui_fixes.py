"""`opatlas analyze` as a reviewer found it: lists in the HTML report, times with units in the
terminal, one name per summary card, signpost windows said as selected, PyBuda options given a
tt-metal CSV, several outputs on standard output, a closed pipe, and bad sources."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import cli_in_process, one_error, report_page, two_device_csv
from opatlas.analyze import Analysis, Column, Source, api
from opatlas.analyze.tables import fmt, header, summary_items
from opatlas.errors import OpatlasError

TT = Path(__file__).parent / "data" / "tenstorrent"
CSV = TT / "ops_perf_results_2025_09_18_11_39_20.csv"
NETLIST = TT / "resnet50_hifi3_fp16b.netlist.yaml"

NS = Column(key="device_time_ns", label="Device Time", role="measured", unit="ns")
CYCLES = Column(key="kernel_cycles", label="kernel", role="measured", unit="cycles")
GBS = Column(key="dram_gbs", label="DRAM", role="rate", unit="GB/s")
COLUMNS = [Column(key="op", label="op", role="id"), NS, CYCLES, GBS,
           Column(key="time_s", label="time", role="measured", unit="s"),
           Column(key="gemm", label="gemm", role="shape"),
           Column(key="shape", label="shape", role="shape")]


def _analysis() -> Analysis:
    rows = [{"op": "matmul", "pass": "fwd", "calls": 1, "time_s": 12.345e-6,
             "device_time_ns": 12345.0, "kernel_cycles": 157415.0, "dram_gbs": 123.456,
             "flops": None, "bytes": None, "bound_time_s": None, "limiter": "unknown",
             "gemm": [1, 7680, 128, 256], "shape": {"M": 64, "dims": [2, 3.0]}, "group": 0}]
    return Analysis(Source(kind="ttmetal", path="x.csv"), {"title": "units"},
                    pd.DataFrame(rows), COLUMNS, "device")


# ------------------------------------------------------------------ 1, 2: cells as text

def test_times_lists_and_cycles_as_text():
    assert fmt(12345.0, NS) == "12.3 µs"  # not 1.234e+04
    assert fmt(2.5e6, NS) == "2.500 ms"
    assert fmt(157415.0, CYCLES) == "157,415"  # not 1.574e+05
    assert fmt([1, 7680, 128, 256], None) == "[1, 7680, 128, 256]"
    assert fmt([2, 3.0], None) == "[2, 3]"
    assert fmt({"M": 64, "dims": [2, 3.0]}, None) == "M=64 dims=[2, 3]"
    assert fmt(123456.7, None) == "123,457"  # a number without a column keeps its digits
    assert header(GBS) == "DRAM (GB/s)" and header(NS) == "Device Time"


def test_terminal_app_shows_nanoseconds_as_times():
    pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")
    from opatlas.analyze.tui import AnalyzerApp

    async def go() -> tuple[list[str], list[str]]:
        app = AnalyzerApp(_analysis())
        async with app.run_test(size=(160, 30)) as pilot:
            await pilot.pause()
            await pilot.press("e", "f")
            table = app.screen.query_one("#ops")
            heads = [str(c.label) for c in table.columns.values()]
            return [str(c) for c in table.get_row_at(0)], heads

    cells, heads = asyncio.run(go())
    assert cells[1:4] == ["12.3 µs", "157,415", "123.5"]
    assert heads[3] == "DRAM (GB/s)"
    assert cells[5:] == ["[1, 7680, 128, 256]", "M=64 dims=[2, 3]"]


def test_report_shows_lists_as_lists_and_formats_as_the_terminal(tmp_path):
    report = api.write_html(_analysis(), tmp_path / "r.html")
    cases = [(12345.0, NS), (2.5e6, NS), (157415.0, CYCLES), (123.456, GBS), (1.5, None),
             (123456.7, None), ([1, 7680, 128, 256], None), ({"M": 64, "dims": [2, 3.5]}, None),
             ({"a": {"b": 1}}, None), (0.0123, Column(key="t", label="t", unit="s"))]
    with report_page(report) as (page, errors):
        page.wait_for_selector("#ops tbody tr")
        cells = page.locator("#ops tbody tr:first-child td").all_inner_texts()
        heads = page.locator("#ops th").all_inner_texts()
        js = [page.evaluate("([v, c]) => fmt(v, c)", [v, c and c.model_dump()])
              for v, c in cases]
    assert errors == []
    row = dict(zip(heads, cells, strict=True))
    assert row["gemm"] == "[1, 7680, 128, 256]"  # not 0=1 1=7680 2=128 3=256
    assert row["shape"] == "M=64 dims=[2, 3]"
    assert row["Device Time"] == "12.3 µs" and row["DRAM (GB/s)"] == "123.5"
    assert js == [fmt(v, c) for v, c in cases]  # the report and the terminal agree


# ------------------------------------------------------------------ 3: one name per card

def test_two_devices_do_not_give_two_cards_of_one_name(tmp_path):
    pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")
    a = api.analyze(two_device_csv(CSV, tmp_path))
    items = summary_items(a)
    labels = [label for label, _, _ in items]
    assert len(labels) == len(set(labels)), labels
    per = a.summary["per_device"]
    assert items[0][0] == "device time (summed over 2 devices)"
    assert items[0][1] == f"{(per['0']['device_time_us'] + per['1']['device_time_us']) / 1e3:.3f} ms"
    assert items[1][:2] == ("device time (devices merged, as tt-perf-report)",
                            f"{a.summary['merged']['device_time_us'] / 1e3:.3f} ms")
    one = summary_items(api.analyze(CSV, extra={"ignore_signposts": True}))
    assert [label for label, _, _ in one].count("device time") == 1  # one device: one card


# ------------------------------------------------------------------ 4: signpost windows

def _repeated_last_signpost(tmp_path: Path) -> Path:
    """The file cut after the 4th 'TTBasicBlock forward started' (its last signpost, a name
    that occurs 4 times) and two ops."""
    path = tmp_path / "ops_perf_results_cut.csv"
    pd.read_csv(CSV).iloc[:86].to_csv(path, index=False)
    return path


def test_window_label_says_which_signpost_it_starts_at(tmp_path):
    pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")
    a = api.analyze(_repeated_last_signpost(tmp_path))
    # tt-perf-report starts at the FIRST signpost bearing the last one's name: 51 ops, not 2
    assert len(a.rows) == 51
    assert a.summary["window"].startswith("after the first of 4 'TTBasicBlock forward started'")


def test_empty_window_hint_names_only_the_signposts_given():
    pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")
    with pytest.raises(OpatlasError, match="no device operation after 'OftNet finished' to "
                                           "the end") as e:
        api.analyze(CSV, extra={"start_signpost": "OftNet finished"})
    assert "end signpost" not in str(e.value)  # none was given


# ------------------------------------------------------------------ 5: PyBuda options

def test_a_tt_metal_csv_given_to_pybuda_options_is_said(capsys, tmp_path):
    for flag in ("-d", "-n"):
        code, _, err = cli_in_process(capsys, "analyze", flag, str(CSV), "--json")
        line = one_error(code, err, "tt-metal device-profiler CSV",
                         f"analyse it as the SOURCE: opatlas analyze {CSV}")
        assert "YAML" not in line
    code, _, err = cli_in_process(capsys, "analyze", "-d", str(NETLIST), "--json")
    one_error(code, err, f"--dir {NETLIST}: a file", "-n/--netlist")
    # a tt-metal SOURCE stays one; the PyBuda option is said not to apply
    code, out, err = cli_in_process(capsys, "analyze", str(CSV), "--ignore-signposts",
                                    "-d", str(tmp_path), "--json")
    assert code == 0 and "--dir does not apply to a ttmetal source: ignored" in err
    assert '"kind": "ttmetal"' in out


# ------------------------------------------------------------------ 6: standard output

def test_two_outputs_on_standard_output_are_refused(capsys):
    code, out, err = cli_in_process(capsys, "analyze", str(CSV), "--ignore-signposts",
                                    "--csv", "-", "--json")
    one_error(code, err, "--csv - and --json", "standard output")
    assert out == ""
    code, _, err = cli_in_process(capsys, "analyze", str(CSV), "--ignore-signposts",
                                  "--csv", "-", "--html", "-")
    one_error(code, err, "--csv - and --html -")


@pytest.mark.parametrize("outputs", [["--csv", "-"], []], ids=["csv", "table"])
def test_a_closed_pipe_ends_quietly(outputs):
    """As `opatlas analyze ... | head -1` with head gone before opatlas writes: exit 0."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "opatlas", "analyze", str(CSV),
                             "--ignore-signposts", *outputs], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone: every write fails with EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err and "error" not in err


# ------------------------------------------------------------------ 7: bad sources

def test_bad_sources_are_one_clear_line(capsys, tmp_path, monkeypatch):
    code, _, err = cli_in_process(capsys, "analyze")
    line = one_error(code, err, "no SOURCE given", "--load")
    assert "not both" not in line
    monkeypatch.chdir(tmp_path)  # a bare word: a missing folder or a config's name
    code, _, err = cli_in_process(capsys, "analyze", "no_such_run")
    one_error(code, err, "no_such_run: no such file or folder", "bundled", "llama2-7b")
    code, _, err = cli_in_process(capsys, "analyze", "no_such_run/")
    one_error(code, err, "no_such_run: no such file or folder")
    (tmp_path / "empty").mkdir()
    code, _, err = cli_in_process(capsys, "analyze", "empty")
    one_error(code, err, "empty: a folder, but not a PyBuda run")
    code, _, err = cli_in_process(capsys, "analyze", "--kind", "ttmetal", "empty")
    one_error(code, err, "empty is a folder, but --kind ttmetal reads one file",
              "ops_perf_results")
    code, _, err = cli_in_process(capsys, "analyze", "--load", "empty")
    one_error(code, err, "--load empty: is a folder")
