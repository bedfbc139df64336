"""The Tenstorrent inputs through `opatlas analyze`: PyBuda's flags, the --json contract, bad
input (exit 2, one paragraph, no traceback), and the HTML report in a real headless Chromium."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import cli_in_process, run_cli
from opatlas.analyze import api
from test_analyze_pybuda import NETLIST, make_run

TT = Path(__file__).parent / "data" / "tenstorrent"
REAL_CSV = TT / "ops_perf_results_2025_09_18_11_39_20.csv"
CONTRACT = ("op", "pass", "calls", "time_s", "flops", "bytes", "bound_time_s", "limiter", "shape")


def test_pybuda_flags_and_json_contract(tmp_path, capsys):
    netlist = make_run(tmp_path / "run")
    code, out, _ = cli_in_process(capsys, "analyze", "-n", str(netlist), "-d", str(tmp_path / "run"),
                       "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["source"]["kind"] == "pybuda"
    s = doc["summary"]
    assert (s["epochs"], s["ops"], s["overall_speed"]) == (2, 3, 58823)
    for row in doc["rows"]:
        assert set(CONTRACT) <= set(row)
        assert {"epoch", "grid", "estimated_cycles", "kernel_cycles", "bw_kernel_cycles",
                "bw_problem"} <= set(row)
    # an epoch's ops run as one pipeline: per input it takes its slowest op's time
    slowest: dict[int, float] = {}
    for r in doc["rows"]:
        slowest[r["epoch"]] = max(slowest.get(r["epoch"], 0.0), r["time_s"])
    assert s["group_times_s"] == pytest.approx({str(e): t for e, t in slowest.items()})
    assert s["total_time_s"] == pytest.approx(sum(slowest.values()))
    assert s["total_time_s"] == pytest.approx(1 / s["overall_speed"], rel=1e-4)
    assert s["total_time_s"] < sum(r["time_s"] for r in doc["rows"])
    code, out, _ = cli_in_process(capsys, "analyze", str(tmp_path / "run"), "-s", "--json")
    assert code == 0 and json.loads(out)["summary"]["epoch_kind"] == "spatial"
    code, out, _ = cli_in_process(capsys, "analyze", "--dir", str(tmp_path / "run"), "--json")
    assert code == 0 and json.loads(out)["summary"]["overall_speed"] == 58823


def test_ttmetal_json_contract(capsys):
    code, out, err = cli_in_process(capsys, "analyze", str(REAL_CSV), "--ignore-signposts", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"]["kind"] == "ttmetal" and doc["group_label"] == "device"
    row = doc["rows"][0]
    assert set(CONTRACT) <= set(row) and {"device", "op_code", "device_time_ns", "bound"} <= set(row)
    assert sum(r["time_s"] for r in doc["rows"]) == pytest.approx(doc["summary"]["total_time_s"])
    code, out, err = cli_in_process(capsys, "analyze", str(REAL_CSV), "--start-signpost",
                         "ResNet module started", "--end-signpost", "ResNet module finished",
                         "--json")
    assert code == 0 and 0 < len(json.loads(out)["rows"]) < 621


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    bad = dict(NETLIST)
    del bad["queues"]
    (tmp / "n").mkdir()
    (tmp / "n" / "bad_netlist.yaml").write_text(yaml.safe_dump(bad))
    (tmp / "ops_perf_results_bad.csv").write_text("OP,TYPE\nMatmul,x\n")
    (tmp / "none").mkdir()
    (tmp / "none" / "perf_results" / "analyzer_results").mkdir(parents=True)
    make_run(tmp / "two")
    shutil.copy(tmp / "two" / "model_netlist.yaml", tmp / "two" / "copy_netlist.yaml")
    return {"missing section": (tmp / "n" / "bad_netlist.yaml", "queues"),
            "wrong header": (tmp / "ops_perf_results_bad.csv", "DEVICE KERNEL DURATION"),
            "no netlist": (tmp / "none", "holds no PyBuda netlist"),
            "two netlists": (tmp / "two", "holds 2 netlists")}


def test_bad_input_exits_2_with_one_paragraph(tmp_path, capsys):
    for what, (path, says) in _bad_inputs(tmp_path).items():
        code, out, err = cli_in_process(capsys, "analyze", str(path), "--json")
        assert code == 2, what
        assert says in err and str(path.name) in err, (what, err)
        assert "Traceback" not in err and out == "" and err.count("\n") == 1, (what, err)


def test_bad_input_as_a_process_has_no_traceback(tmp_path):
    bad = tmp_path / "ops_perf_results_bad.csv"
    bad.write_text("OP,TYPE\nMatmul,x\n")
    proc = run_cli("analyze", str(bad), "--json", "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "ops_perf_results_bad.csv" in proc.stderr and not (tmp_path / "r.html").exists()


# ---------------------------------------------------------------- the HTML report

def _analyses(tmp: Path) -> dict[str, object]:
    make_run(tmp / "run")
    return {"pybuda-run": api.analyze(tmp / "run"),
            "pybuda-netlist": api.analyze(TT / "bert_large_train_encoders.netlist.yaml"),
            "ttmetal": api.analyze(REAL_CSV, extra={"ignore_signposts": True})}


def test_html_report_is_self_contained(tmp_path):
    for name, a in _analyses(tmp_path).items():
        text = api.write_html(a, tmp_path / f"{name}.html").read_text()
        assert "<script src" not in text and "https://" not in text.split("<script")[0]
        data = json.loads(text.split("type=application/json>")[1].split("</script>")[0]
                          .replace("<\\/", "</"))
        assert len(data["rows"]) == len(a.rows) and data["group_label"] in ("epoch", "device")
        assert data["peaks"]["flops"] and data["peaks"]["bytes"]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_html_report_in_headless_chromium(tmp_path):
    if _chromium() is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it in CI)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            for name, a in _analyses(tmp_path).items():
                path = api.write_html(a, tmp_path / f"{name}.html")
                page = browser.new_page()
                errors: list[str] = []
                page.on("console", lambda m, e=errors: e.append(m.text) if m.type == "error"
                        else None)
                page.on("pageerror", lambda exc, e=errors: e.append(str(exc)))
                page.goto(path.as_uri())
                assert errors == [], (name, errors)
                assert page.locator("#ops tbody tr").count() > 0, name
                assert page.locator("#cards *").count() > 0, name
                if name != "pybuda-netlist":  # measured FLOP/s put ops on the roofline
                    assert page.locator("#roofline circle").count() > 0, name
                page.screenshot(path=str(tmp_path / f"{name}.png"))
                page.close()
        finally:
            browser.close()


# ---------------------------------------------------------------- the terminal app

def _cells(app, table_id: str) -> list[list[str]]:
    from textual.widgets import DataTable

    t = app.screen.query_one(table_id, DataTable)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


def test_pybuda_run_in_the_terminal_app(tmp_path):
    pytest.importorskip("textual", reason="the terminal app is opatlas[tui]")
    import asyncio

    from textual.widgets import DataTable, Static

    from opatlas.analyze.tui import AnalyzerApp, DetailScreen, StageScreen

    make_run(tmp_path / "run")
    a = api.analyze(tmp_path / "run")

    async def drive() -> None:
        app = AnalyzerApp(a, {"source": str(tmp_path / "run")})
        async with app.run_test(size=(200, 50)) as pilot:
            cards = str(app.screen.query_one("#cards", Static).render())
            assert "58,823 samples/s" in cards and "approx. math utilization" in cards
            assert [r[0] for r in _cells(app, "#groups")] == ["0", "1"]  # the epochs
            await pilot.press("e")
            assert isinstance(app.screen, StageScreen)
            assert [r[0] for r in _cells(app, "#ops")] == ["gelu0", "mm0"]  # slowest first
            table = app.screen.query_one("#ops", DataTable)
            labels = [c.label.plain for c in table.columns.values()]
            bw_util = table.get_row_at(0)[labels.index("bw_util")]
            assert "red" in str(bw_util.style)  # gelu0's 10% bandwidth-bound utilization
            await pilot.press("n")
            assert [r[0] for r in _cells(app, "#ops")] == ["add0"]
            await pilot.press("enter")
            assert isinstance(app.screen, DetailScreen)
            assert "add0" in str(app.screen.query_one("#detail", Static).render())
            await pilot.press("escape", "r")  # reload reads the folder again
            await pilot.press("q")

    asyncio.run(drive())


def test_ttmetal_profile_in_the_terminal_app():
    pytest.importorskip("textual", reason="the terminal app is opatlas[tui]")
    import asyncio

    from opatlas.analyze.tui import AnalyzerApp, StageScreen

    a = api.analyze(REAL_CSV, extra={"ignore_signposts": True})

    async def drive() -> None:
        app = AnalyzerApp(a)
        async with app.run_test(size=(200, 50)) as pilot:
            assert [r[0] for r in _cells(app, "#groups")] == ["0"]  # one device
            await pilot.press("e")
            assert isinstance(app.screen, StageScreen)
            rows = _cells(app, "#ops")
            assert len(rows) == 500  # the first page of 621 ops
            assert "ReshapeDeviceOperation" in " ".join(rows[0])  # the longest op first
            await pilot.press("right_square_bracket")
            assert len(_cells(app, "#ops")) == 121
            await pilot.press("h", "escape", "s", "q")

    asyncio.run(drive())
