"""Session 39's new-user review of the CLI: --help examples that run as typed in the repo,
--plot saying where it wrote, bound fusion's --at --json as gemm's, q quitting from the
terminal app's modal screens, export-tt's log pace off a terminal, and `opatlas --help`'s
one-line command descriptions."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO, cli_in_process

# what the analyze examples name that stands for a file of the user's own (not shipped)
USER_FILES = {"trace.json.gz", "my.duckdb"}


def _examples(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
              *verb: str) -> list[list[str]]:
    """The example command lines ``opatlas VERB --help`` shows, each as its words after
    ``opatlas VERB`` (a line ending in a backslash joined with the next)."""
    monkeypatch.setenv("COLUMNS", "250")  # no example wrapped by the help's width
    code, out, _ = cli_in_process(capsys, *verb, "--help")
    assert code == 0
    prefix = " ".join(("opatlas", *verb)) + " "
    lines, joined = [ln.strip(" │") for ln in out.splitlines()], []
    for i, line in enumerate(lines):
        if line.startswith(prefix):
            text = line
            while text.endswith("\\"):
                i += 1
                text = text[:-1] + " " + lines[i]
            joined.append(shlex.split(text)[len(verb) + 1:])
    assert joined, out
    return joined


@pytest.mark.parametrize("verb", [("run",), ("sweep", "expand")])
def test_spec_examples_name_specs_that_resolve(verb, capsys, monkeypatch):
    from opatlas.spec import resolve_spec

    monkeypatch.chdir(REPO)
    for words in _examples(capsys, monkeypatch, *verb):
        assert not words[0].startswith("-"), words
        resolve_spec(words[0])  # raises "no such spec file ..." for a name that is not there


def test_analyze_examples_name_sources_that_exist(capsys, monkeypatch):
    from opatlas.analyze.sources import bundled_configs

    monkeypatch.chdir(REPO)
    sources = [w[0] for w in _examples(capsys, monkeypatch, "analyze") if not w[0].startswith("-")]
    assert any(s.endswith(".csv") for s in sources), sources  # the tt-metal example is checked
    for source in sources:
        assert source in USER_FILES or source in bundled_configs() or Path(source).exists(), \
            source


def test_export_tt_wording_and_log_pace(tmp_path, capsys):
    where = "input_core_grid == '2x2' and input_shard_strategy == 'BLOCK'"
    code, out, err = cli_in_process(capsys, "sweep", "export-tt", "reshard", str(tmp_path),
                                    "--where", where)
    assert code == 0, err
    files = int(out.split("wrote ")[1].split()[0])
    assert files > 10
    assert "--where picks fewer" not in err
    logs = [ln for ln in err.splitlines() if "export-tt |" in ln]
    assert 1 <= len(logs) <= 3, err  # was one per file written
    assert "100.00%" in logs[-1]


def test_export_tt_without_where_says_where_picks_fewer(monkeypatch, tmp_path, capsys):
    import opatlas.sweep
    from opatlas.tenstorrent import ttjson

    # the whole sweep's expansion (a minute) and export (2 GB) are not what is checked
    monkeypatch.setattr(opatlas.sweep, "expand", lambda spec, where: SimpleNamespace(
        valid=1, vectors=[]))
    monkeypatch.setattr(ttjson, "export_tt", lambda vectors, outdir, on_file: [])
    code, _, err = cli_in_process(capsys, "sweep", "export-tt", "reshard", str(tmp_path))
    assert code == 0, err
    assert "(--where picks fewer)" in err


class _Progress:
    def __init__(self, interactive: bool) -> None:
        self.interactive, self.calls = interactive, []

    def advance(self, status: str, count: int) -> None:
        self.calls.append((status, count))


def test_paced_advance_gathers_steps_off_a_terminal():
    from opatlas.cli.sweep_cmd import PacedAdvance

    log = _Progress(interactive=False)
    paced = PacedAdvance(log, "written", seconds=3600)
    for _ in range(50):
        paced(100)
    assert log.calls == []
    paced.flush()
    assert log.calls == [("written", 5000)]
    bar = _Progress(interactive=True)
    paced = PacedAdvance(bar, "written", seconds=3600)
    paced(7)
    paced(8)
    paced.flush()
    assert bar.calls == [("written", 7), ("written", 8)]


@pytest.mark.parametrize("args", [
    ["bound", "gemm", "64", "64", "64"],
    ["bound", "fusion", "--layer", "64,32,64", "--layer", "64,64,32"],
    ["estimate", "llama2-7b"],
])
def test_plot_says_where_it_wrote(args, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "fig.png"
    code, out, err = cli_in_process(capsys, *args, "--json", "--plot", str(plot))
    assert code == 0, err
    assert plot.is_file()
    json.loads(out)  # standard output stays the JSON alone
    assert f"wrote {plot}" in err


def test_fusion_at_json_has_gemm_fields(capsys):
    code, out, err = cli_in_process(capsys, "bound", "gemm", "64", "64", "64", "--at", "100",
                                    "--word-bytes", "2", "--json")
    assert code == 0, err
    gemm = json.loads(out)
    code, out, err = cli_in_process(capsys, "bound", "fusion", "--layer", "64,32,64", "--layer",
                                    "64,64,32", "--at", "100", "--word-bytes", "2", "--json")
    assert code == 0, err
    fusion = json.loads(out)
    for key in ("units", "buffer_bytes", "accesses_bytes", "word_bytes", "buffer"):
        assert key in fusion, key
    assert fusion["buffer_bytes"] == gemm["buffer_bytes"] == 200
    assert fusion["accesses_bytes"] == {k: None if v is None else 2 * v
                                        for k, v in fusion["accesses"].items()}
    assert any(v is not None for v in fusion["accesses"].values())
    assert fusion["units"] == {k: v for k, v in gemm["units"].items() if k != "oi"}


def test_fusion_at_json_below_every_buffer(capsys):
    code, out, err = cli_in_process(capsys, "bound", "fusion", "--layer", "64,32,64", "--layer",
                                    "64,64,32", "--at", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["accesses_bytes"].values()) == {None}
    assert doc["buffer_bytes"] == 1


@pytest.mark.parametrize("keys", [["h"], ["e", "enter"]])
def test_q_quits_from_the_modal_screens(keys):
    pytest.importorskip("textual")
    from opatlas.analyze.tui import AnalyzerApp, DetailScreen, HelpScreen
    from test_analyze_tui import _analysis

    async def go() -> int | None:
        app = AnalyzerApp(_analysis())
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            await pilot.press(*keys)
            assert isinstance(app.screen, HelpScreen | DetailScreen)
            await pilot.press("q")
            await pilot.pause()
            return app.return_code  # None: still running
    assert asyncio.run(go()) == 0


def test_top_level_help_descriptions_are_one_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = cli_in_process(capsys, "--help")
    assert code == 0
    rows = [ln.strip("│").rstrip() for ln in out.split("Commands")[1].splitlines()]
    rows = [r for r in rows if r.strip() and not r.startswith(("─", "╰", "╭"))]
    for name in ("ops", "calibrate", "reblock"):
        row = next(r for r in rows if r.split()[0] == name)
        following = rows[rows.index(row) + 1]
        assert len(following) - len(following.lstrip()) <= 2, (row, following)  # carried over
        assert row.endswith("."), row
