"""Views of one analysis: --json, --csv, --save/--load, --trace, and the HTML report opened in
a real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from conftest import report_page
from opatlas.analyze import Analysis, api
from opatlas.cli import main


@pytest.fixture(scope="module")
def pipeline() -> Analysis:
    return api.analyze("llama2-70b")  # 4 stages, interleaved: a timeline worth drawing


def test_csv_save_load_round_trip(tmp_path, pipeline):
    csv = api.write_csv(pipeline, tmp_path / "rows.csv")
    back = pd.read_csv(csv)
    assert list(back["op"]) == list(pipeline.rows["op"])
    assert back["time_s"].sum() == pytest.approx(pipeline.total_time_s)
    assert json.loads(back["shape"].iloc[0]) == pipeline.rows["shape"].iloc[0]
    saved = pipeline.save(tmp_path / "a.json")
    loaded = Analysis.load(saved)
    assert loaded.to_json() == pipeline.to_json()
    assert loaded.summary["timeline"] == pipeline.summary["timeline"]


def test_cli_load_and_trace_export(tmp_path, capsys, pipeline):
    saved = pipeline.save(tmp_path / "a.json")
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--load", str(saved), "--json", "--trace", str(tmp_path / "t.json")])
    assert exc.value.code in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["total_time_s"] == pytest.approx(pipeline.total_time_s)
    doc = json.loads((tmp_path / "t.json").read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    spans = [e for e in events if e.get("ph") == "X"]
    start = min(e["ts"] for e in spans)
    end = max(e["ts"] + e["dur"] for e in spans)
    assert (end - start) * 1e-6 == pytest.approx(pipeline.summary["step_time_s"], rel=0.01)
    assert len({e["pid"] for e in spans}) == 4  # one process per pipeline stage


def test_html_is_one_self_contained_file(tmp_path, pipeline):
    text = api.write_html(pipeline, tmp_path / "r.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<script src" not in text and "<link" not in text
    data = json.loads(re.search(r'<script id=data type=application/json>(.*?)</script>', text,
                                re.S).group(1))
    assert len(data["rows"]) == len(pipeline.rows)
    assert data["frontier"]["dims"]["K"] > 0
    assert len(data["timeline"]) > 0


def test_report_in_headless_chromium(tmp_path, pipeline):
    report = api.write_html(pipeline, tmp_path / "r.html")
    with report_page(report, {"width": 1280, "height": 900}, console_errors=True) as (page,
                                                                                    errors):
        page.wait_for_selector("#ops tbody tr")
        assert errors == []
        counts = {c: page.locator(f"svg#{c} > *").count()
                  for c in ("breakdown", "timeline", "roofline", "frontier")}
        assert counts["breakdown"] > 2 and counts["roofline"] > 10 and counts["frontier"] > 5
        blocks = page.locator("svg#timeline rect[data-tip]").count()
        assert blocks >= len([b for b in pipeline.summary["timeline"] if b["dur_s"] > 0])
        assert page.locator("svg#roofline circle").count() == int(
            ((pipeline.rows["flops"] > 0) & (pipeline.rows["bytes"] > 0)).sum())

        def first(col: int) -> str:
            return page.locator(f"#ops tbody tr:first-child td:nth-child({col})").inner_text()

        assert page.locator("#ops th.desc").inner_text().startswith("time")
        slowest = pipeline.rows.loc[pipeline.rows["time_s"].idxmax(), "op"]
        assert first(1) == slowest
        page.click("#ops th[data-key=op]")  # sort by op name, A to Z
        names = sorted(pipeline.rows["op"].astype(str), key=str.casefold)  # as localeCompare
        assert first(1) == names[0]
        page.click("#ops th[data-key=op]")
        assert first(1) == names[-1]
        page.fill("#filter", "all_reduce")
        shown = page.locator("#ops tbody tr").count()
        assert shown == int(pipeline.rows.astype(str).apply(
            lambda r: r.str.lower().str.contains("all_reduce")).any(axis=1).sum())
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert (tmp_path / "report.png").stat().st_size > 20_000
