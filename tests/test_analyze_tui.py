"""The terminal app, headless (App.run_test + Pilot) and as snapshots (pytest-textual-snapshot):
PyBuda's screens, keys and colours on any analysis."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")

from opatlas.analyze import (
    Analysis,
    Column,
    Source,
    tui,
)
from opatlas.analyze.tui import (
    AnalyzerApp,
    DetailScreen,
    HelpScreen,
    StageScreen,
    SummaryScreen,
)

COLUMNS = [Column(key="op", label="op", role="id"), Column(key="pass", label="pass", role="id"),
           Column(key="time_s", label="time", role="measured", unit="s"),
           Column(key="predicted_time_s", label="predicted", role="estimated", unit="s"),
           Column(key="error", label="error", role="error", unit="%"),
           Column(key="util_compute", label="util", role="util", unit="%"),
           Column(key="bound_time_s", label="bound", role="bound", unit="s"),
           Column(key="headroom", label="headroom", role="ratio", unit="x"),
           Column(key="limiter", label="limiter", role="text"),
           Column(key="shape", label="shape", role="shape")]


def _analysis(rows_per_epoch: int = 4) -> Analysis:
    rows = []
    for epoch in (0, 1):
        for i in range(rows_per_epoch):
            t = (i + 1) * 1e-3 * (epoch + 1)
            rows.append({"op": f"matmul_{epoch}_{i}_with_a_rather_long_generated_name",
                         "pass": "fwd", "calls": 1.0, "time_s": t, "predicted_time_s": t * (1 + 0.3 * i),
                         "error": 0.3 * i, "util_compute": [0.8, 0.4, 0.1, 0.6][i % 4],
                         "flops": 1e9, "bytes": 1e6, "bound_time_s": t / 2, "headroom": 2.0,
                         "limiter": "compute", "shape": {"m": 64 * (i + 1)}, "group": epoch})
    return Analysis(Source(kind="pybuda", path="run/"), {"title": "a test run",
                                                         "throughput": 1234.0,
                                                         "throughput_unit": "samples/s",
                                                         "utilization": 0.62},
                    pd.DataFrame(rows), COLUMNS, "epoch")


def _run(app: AnalyzerApp, steps):
    async def go():
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            return await steps(app, pilot)
    return asyncio.run(go())


def _cells(app) -> list[list[str]]:
    table = app.screen.query_one("#ops")
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_screens_and_keys():
    async def steps(app, pilot):
        assert isinstance(app.screen, SummaryScreen)
        groups = app.screen.query_one("#groups")
        assert groups.row_count == 2
        await pilot.press("e")
        assert isinstance(app.screen, StageScreen)
        first = _cells(app)
        assert len(first) == 4 and first[0][0].startswith("matmul_0_3")  # slowest first
        assert first[0][0].endswith("…")  # names shortened until F
        await pilot.press("f")
        assert _cells(app)[0][0] == "matmul_0_3_with_a_rather_long_generated_name"
        await pilot.press("n")
        assert _cells(app)[0][0].startswith("matmul_1_3")
        await pilot.press("p")
        assert _cells(app)[0][0].startswith("matmul_0_3")
        await pilot.press("j", "j", "enter")
        assert isinstance(app.screen, DetailScreen)
        assert app.screen.row["op"].startswith("matmul_0_1")
        await pilot.press("escape", "h")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "s")
        assert isinstance(app.screen, SummaryScreen)
        await pilot.press("q")
        return True
    assert _run(AnalyzerApp(_analysis()), steps)


def test_sorting_by_any_column():
    async def steps(app, pilot):
        await pilot.press("e")
        screen = app.screen
        await pilot.press("greater_than_sign")  # time -> predicted, descending
        assert screen.sort_key == "predicted_time_s" and screen.descending
        await pilot.press("greater_than_sign")  # -> error
        errors = [r[4] for r in _cells(app)]
        assert errors == ["90.0%", "60.0%", "30.0%", "0.0%"]
        await pilot.press("greater_than_sign", "greater_than_sign", "greater_than_sign")
        assert screen.sort_key == "headroom"
        screen.set_sort("op")  # what a header click does
        assert not screen.descending and _cells(app)[0][0].startswith("matmul_0_0")
        screen.set_sort("op")
        assert screen.descending and _cells(app)[0][0].startswith("matmul_0_3")
        return True
    assert _run(AnalyzerApp(_analysis()), steps)


def test_pybuda_colours():
    async def steps(app, pilot):
        await pilot.press("e")
        table = app.screen.query_one("#ops")
        util, error = {}, {}
        for i in range(table.row_count):
            row = table.get_row_at(i)
            util[str(row[5])] = str(row[5].style)
            error[str(row[4])] = str(row[4].style)
        # utilization: green above 50%, red below 25%
        assert "green" in util["80.0%"] and "green" in util["60.0%"]
        assert util["40.0%"] == "" and "red" in util["10.0%"]
        # estimate vs measured: yellow at 20% off, red at 50%
        assert error["0.0%"] == "" and "yellow" in error["30.0%"]
        assert "red" in error["60.0%"] and "red" in error["90.0%"]
        return True
    assert _run(AnalyzerApp(_analysis()), steps)


def test_big_tables_paginate(monkeypatch):
    monkeypatch.setattr(tui, "PAGE_ROWS", 10)

    async def steps(app, pilot):
        await pilot.press("e")
        assert app.screen.query_one("#ops").row_count == 10
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert app.screen.query_one("#ops").row_count == 5  # 25 rows: 10 + 10 + 5
        assert app.screen.page == 2
        await pilot.press("left_square_bracket")
        assert app.screen.query_one("#ops").row_count == 10
        return True
    assert _run(AnalyzerApp(_analysis(25)), steps)


def test_reload_reads_the_source_again(monkeypatch):
    from opatlas.analyze import api

    calls = []
    monkeypatch.setattr(api, "analyze", lambda source, **kw: calls.append(source) or _analysis(2))

    async def steps(app, pilot):
        await pilot.press("e", "r")
        await pilot.pause()
        return app.screen.query_one("#ops").row_count
    assert _run(AnalyzerApp(_analysis(), {"source": "run/", "kind": None}), steps) == 2
    assert calls == ["run/"]


def test_summary_snapshot(snap_compare):
    assert snap_compare(AnalyzerApp(_analysis()), terminal_size=(120, 30))


def test_stage_snapshot(snap_compare):
    assert snap_compare(AnalyzerApp(_analysis()), press=["e"], terminal_size=(120, 30))


def test_detail_shows_a_measurements_spread():
    a = _analysis()
    a.rows["std_s"] = 1e-5
    a.rows["repeats"] = 7

    async def steps(app, pilot):
        await pilot.press("e", "enter")
        text = str(app.screen.render_detail())
        return text
    text = _run(AnalyzerApp(a), steps)
    assert "std_s" in text and "10.0 µs" in text and "repeats" in text
    assert "bound" in text and "2.00x its bound: limited by compute" in text


def test_the_summarys_tables_have_a_screen():
    from textual.widgets import DataTable, TabbedContent

    from opatlas.analyze.tables import detail_tables
    from opatlas.analyze.tui import TablesScreen

    a = _analysis()
    a.summary["epoch_summary"] = [{"epoch": 0, "pipeline_cycles": 100, "util": 36.6},
                                  {"epoch": 1, "pipeline_cycles": 200, "util": 27.4}]
    a.summary["bounds"] = {"orojenesis": 6, "not_comparable": 27}

    async def steps(app, pilot):
        await pilot.press("t")
        assert isinstance(app.screen, TablesScreen)
        assert app.screen.query_one(TabbedContent).tab_count == len(detail_tables(a)) == 2
        epochs = app.screen.query_one("#table-0", DataTable)
        assert epochs.row_count == 2 and str(epochs.get_row_at(1)[2]) == "27.4"
        await pilot.press("s")
        assert isinstance(app.screen, SummaryScreen)
        return True
    assert _run(AnalyzerApp(a), steps)
