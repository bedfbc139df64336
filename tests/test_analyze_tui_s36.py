"""Review 36: the detail tables keep a percent column whole (rows without a value included),
the terminal app's documented keys work on every screen with a table (j/k, n/p), r says when
it has nothing to reread (--load), and the op detail keeps its labels apart from their values,
says a flag only when set and names what the rows' time is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from opatlas.analyze import Analysis, Column, Source
from opatlas.analyze.tables import detail_tables, fmt

REAL = Path("/work/shared/data/tt-metal-profiler/ops_perf_results_2025_09_18_11_39_20.csv")

COLUMNS = [Column(key="op", label="op", role="id"), Column(key="pass", label="pass", role="id"),
           Column(key="time_s", label="time", role="measured", unit="s",
                  help="cycles per input / clock"),
           Column(key="theoretical", label="theoretical", role="count", unit="cycles"),
           Column(key="least_bytes", label="least DRAM bytes", role="count", unit="B"),
           Column(key="util_weighting", label="util (weighting)", role="text"),
           Column(key="limiter", label="limiter", role="text")]


def _analysis(groups: int = 3, per_group: int = 4, summary: dict | None = None) -> Analysis:
    rows = [{"op": f"op_{g}_{i}", "pass": "fwd", "calls": 1.0, "time_s": (i + 1) * 1e-3,
             "flops": 1e9, "bytes": 1e6, "bound_time_s": 5e-4, "limiter": "compute",
             "shape": {}, "group": g, "theoretical": 21504.0, "least_bytes": 181.21e6,
             "util_weighting": None, "invalid_duration": i == 0,
             "global_call_count": 236544}
            for g in range(groups) for i in range(per_group)]
    return Analysis(Source(kind="pybuda", path="run/"), {"title": "t", **(summary or {})},
                    pd.DataFrame(rows), COLUMNS, "epoch")


def _run(app, steps, size=(140, 40)):
    async def go():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            return await steps(app, pilot)
    return asyncio.run(go())


# ---------------------------------------------------------------- 8: one percent column

BY_OP_CODE = [{"op_code": "Reshape", "ops": 22, "mean_flops_util": None,
               "device_time_share": 0.4685},
              {"op_code": "Conv", "ops": 54, "mean_flops_util": 0.4811,
               "device_time_share": 0.08205},
              {"op_code": "Matmul", "ops": 3, "mean_flops_util": float("nan"),
               "device_time_share": 0.01}]


def test_a_fraction_column_is_renamed_whole_in_its_place():
    a = _analysis(summary={"by_op_code": BY_OP_CODE})
    rows = next(t["rows"] for t in detail_tables(a) if t["title"] == "by op code")
    for r in rows:
        assert list(r) == ["op_code", "ops", "mean_flops_util (%)", "device_time_share (%)"]
    assert rows[0]["mean_flops_util (%)"] is None
    assert rows[1]["mean_flops_util (%)"] == pytest.approx(48.11)
    assert rows[0]["device_time_share (%)"] == pytest.approx(46.85)


def test_a_percent_key_column_is_renamed_whole():
    a = _analysis(summary={"epochs": [{"epoch": 0, "util": None}, {"epoch": 1, "util": 27.4}],
                           "percent_keys": ["epochs.util"]})
    rows = next(t["rows"] for t in detail_tables(a) if t["title"] == "epochs")
    assert [list(r) for r in rows] == [["epoch", "util (%)"]] * 2
    assert rows[1]["util (%)"] == 27.4  # a percent already: as it is


def test_a_fraction_named_column_of_words_keeps_its_name():
    a = _analysis(summary={"t": [{"dram_util": "n/a"}, {"dram_util": 0.5}]})
    rows = next(t["rows"] for t in detail_tables(a) if t["title"] == "t")
    assert rows == [{"dram_util": "n/a"}, {"dram_util": 0.5}]


def test_the_tables_screen_shows_one_percent_column():
    pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")
    from textual.widgets import DataTable

    from opatlas.analyze.tui import AnalyzerApp

    a = _analysis(summary={"by_op_code": BY_OP_CODE})

    async def steps(app, pilot):
        await pilot.press("t")
        table = app.screen.query_one("#table-0", DataTable)
        heads = [str(c.label) for c in table.columns.values()]
        return heads, [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]

    heads, cells = _run(AnalyzerApp(a), steps)
    assert heads == ["op_code", "ops", "mean_flops_util (%)", "device_time_share (%)"]
    assert cells[0][2] == "-" and cells[1][2] == "48.11" and cells[2][2] == "-"


@pytest.mark.skipif(not REAL.exists(), reason="the tt-metal profiler CSV is not here")
def test_the_real_by_op_code_table_has_one_flops_util_column():
    from opatlas.analyze import api

    a = api.analyze(REAL, extra={"ignore_signposts": True})
    rows = next(t["rows"] for t in detail_tables(a) if t["title"] == "by op code")
    keys = list(rows[0])
    assert "mean_flops_util" not in keys and keys.count("mean_flops_util (%)") == 1
    assert all(list(r) == keys for r in rows)
    values = [r["mean_flops_util (%)"] for r in rows if r["mean_flops_util (%)"] is not None]
    assert [round(v, 2) for v in values][:2] == [48.11, 67.13]


# ---------------------------------------------------------------- 12: keys on every screen

def test_j_k_n_p_move_on_the_summary():
    pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")
    from opatlas.analyze.tui import AnalyzerApp, StageScreen, SummaryScreen

    async def steps(app, pilot):
        groups = app.screen.query_one("#groups")
        seen = []
        for key in ("j", "j", "k", "n", "p", "p", "k"):
            await pilot.press(key)
            await pilot.pause()
            seen.append(groups.cursor_row)
        # p from the first stage goes to the last (as n/p on the op table); k stays on it
        assert seen == [1, 2, 1, 2, 1, 0, 0]
        await pilot.press("n", "n")
        await pilot.pause()
        await pilot.press("e")  # the stage under the cursor
        await pilot.pause()
        assert isinstance(app.screen, StageScreen)
        assert app.screen.sub_title.startswith("epoch 2 (3 of 3)")
        await pilot.press("p", "s")  # back on the summary: the cursor on the stage shown
        await pilot.pause()
        assert isinstance(app.screen, SummaryScreen)
        assert app.screen.query_one("#groups").cursor_row == 1
        await pilot.press("j", "j", "j")  # kept on the table
        await pilot.pause()
        return app.screen.query_one("#groups").cursor_row

    assert _run(AnalyzerApp(_analysis()), steps) == 2


def test_j_k_n_p_work_on_the_tables_screen():
    pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")
    from textual.widgets import DataTable, TabbedContent

    from opatlas.analyze.tui import AnalyzerApp, TablesScreen

    a = _analysis(summary={"by_op_code": BY_OP_CODE,
                           "top_ops": [{"op": f"o{i}", "t": i} for i in range(5)]})

    async def steps(app, pilot):
        await pilot.press("t")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TablesScreen)
        tabs = screen.query_one(TabbedContent)
        first = screen.query_one("#table-0", DataTable)
        await pilot.press("j", "j")
        await pilot.pause()
        assert first.cursor_row == 2
        await pilot.press("k")
        await pilot.pause()
        assert first.cursor_row == 1
        await pilot.press("n")  # the next table
        await pilot.pause()
        assert tabs.active == "tab-1"
        second = screen.query_one("#table-1", DataTable)
        await pilot.press("j", "j", "j")
        await pilot.pause()
        assert second.cursor_row == 3 and first.cursor_row == 1
        await pilot.press("n")  # from the last table, the first
        await pilot.pause()
        assert tabs.active == "tab-0"
        await pilot.press("p")
        await pilot.pause()
        assert tabs.active == "tab-1"
        return True

    assert _run(AnalyzerApp(a), steps)


def test_r_on_a_loaded_analysis_says_it_has_nothing_to_reread(tmp_path, monkeypatch):
    pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")
    from opatlas.analyze import api
    from opatlas.analyze.tui import AnalyzerApp

    saved = _analysis().save(tmp_path / "a.json")
    loaded = api.load(saved)
    calls = []
    monkeypatch.setattr(api, "analyze", lambda *a, **kw: calls.append(a))

    async def steps(app, pilot):
        said = []
        monkeypatch.setattr(app, "notify", lambda msg, **kw: said.append((msg, kw)))
        await pilot.press("r")
        await pilot.pause()
        return said

    # what `opatlas analyze --load a.json` passes: no source
    said = _run(AnalyzerApp(loaded, {"source": None, "kind": None, "strict": False}), steps)
    assert not calls
    assert len(said) == 1 and "reloaded" not in said[0][0]
    assert "nothing to reread" in said[0][0] and "--load" in said[0][0]
    assert said[0][1].get("severity") == "warning"


def test_r_rereads_a_saved_file_given_as_the_source(tmp_path, monkeypatch):
    pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")
    from opatlas.analyze import api
    from opatlas.analyze.tui import AnalyzerApp

    saved = _analysis().save(tmp_path / "a.json")
    _analysis(groups=1, per_group=2).save(tmp_path / "b.json")

    async def steps(app, pilot):
        said = []
        monkeypatch.setattr(app, "notify", lambda msg, **kw: said.append(msg))
        saved.write_bytes((tmp_path / "b.json").read_bytes())  # saved again, meanwhile
        await pilot.press("r")
        await pilot.pause()
        return said, app.screen.query_one("#groups").row_count

    said, rows = _run(AnalyzerApp(api.load(saved), {"source": str(saved), "kind": None}),
                      steps)
    assert rows == 1 and said == [f"reloaded {saved}"]


# ---------------------------------------------------------------- 15: the op detail

def _detail(a: Analysis, keys=("e", "enter")) -> str:
    pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")
    from opatlas.analyze.tui import AnalyzerApp, DetailScreen

    async def steps(app, pilot):
        await pilot.press(*keys)
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        return str(app.screen.render_detail())

    return _run(AnalyzerApp(a), steps)


def test_the_detail_keeps_labels_apart_from_values():
    text = _detail(_analysis())
    lines = text.splitlines()
    for label, value in (("theoretical (cycles)", "21,504"), ("least DRAM bytes", "181.21 MB"),
                         ("util (weighting)", "-"), ("global_call_count", "236,544")):
        line = next(x for x in lines if x.strip().startswith(label))
        assert line.split(label, 1)[1].startswith("  "), line
        assert line.split(label, 1)[1].strip() == value
    # the values start in one column
    starts = {next(x).find(v) for v in ("21,504", "181.21 MB", "236,544")
              for x in [iter(y for y in lines if v in y)]}
    assert len(starts) == 1


def test_a_very_long_label_still_has_two_spaces():
    a = _analysis()
    a.rows["a_field_with_a_name_far_longer_than_thirty_characters"] = 7
    line = next(x for x in _detail(a).splitlines() if "far_longer" in x)
    assert line.endswith("characters  7")


def test_invalid_duration_said_only_when_set():
    # slowest first: the first row the table shows is op_0_3 (valid), j j j reaches op_0_0
    valid = _detail(_analysis())
    assert "invalid" not in valid and "invalid_duration" not in valid
    invalid = _detail(_analysis(), keys=("e", "j", "j", "j", "enter"))
    assert "invalid_duration" not in invalid
    line = next(x for x in invalid.splitlines() if "invalid duration" in x)
    assert line.split("invalid duration", 1)[1].strip().startswith("yes: ")
    assert "left out of every total" in line


def test_a_bool_cell_reads_yes_or_no_numpys_too():
    assert fmt(np.False_, Column(key="x", label="x", role="count")) == "no"
    assert fmt(np.True_, None) == "yes" and fmt(False, None) == "no"


def test_the_detail_heading_says_what_the_time_is():
    text = _detail(_analysis())
    assert "time per step" not in text
    assert "where it stands (time: cycles per input / clock;" in text
    a = _analysis()
    a.columns = [c.model_copy(update={"label": "measured", "help": "median per call"})
                 if c.key == "time_s" else c for c in a.columns]
    assert "where it stands (time: measured, median per call;" in _detail(a)


@pytest.mark.skipif(not REAL.exists(), reason="the tt-metal profiler CSV is not here")
def test_the_real_tt_metal_detail():
    from opatlas.analyze import api

    text = _detail(api.analyze(REAL, extra={"ignore_signposts": True}))
    assert "time per step" not in text and "device kernel time" in text
    assert "invalid_duration" not in text
    for label in ("least DRAM bytes", "sim estimate from", "global_call_count"):
        line = next(x for x in text.splitlines() if x.strip().startswith(label))
        assert line.split(label, 1)[1].startswith("  "), line


def test_time_said_without_help():
    from opatlas.analyze.tui import time_said

    a = _analysis()
    a.columns = [c.model_copy(update={"help": ""}) if c.key == "time_s" else c
                 for c in a.columns]
    assert time_said(a) == "time"
    a.columns = [c.model_copy(update={"label": "measured"}) if c.key == "time_s" else c
                 for c in a.columns]
    assert time_said(a) == "time: measured"
    a.columns = [c for c in a.columns if c.key != "time_s"]
    assert time_said(a) == "time"
