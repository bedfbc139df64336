from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, check: bool = False
            ) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "opatlas", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"opatlas {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def cli_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``opatlas ARGS`` in this process (no interpreter start-up): exit code, stdout, stderr."""
    from opatlas.cli import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error(code: int, err: str, *needles: str) -> str:
    """Assert a bad input's answer: exit 2, no traceback, exactly one error line holding every
    needle; returns that line."""
    assert code == 2 and "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("opatlas: error")]
    assert len(errors) == 1, err
    for n in needles:
        assert n in errors[0], err
    return errors[0]


@pytest.fixture
def data_dir() -> Path:
    return DATA


def refused(load: Any, path: Path, text: str, match: str) -> Any:
    """``text`` written to ``path`` and loaded with ``load``: the SpecError it must raise."""
    from opatlas.errors import SpecError

    path.write_text(text)
    with pytest.raises(SpecError, match=match) as info:
        load(path)
    return info.value


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def playwright_or_skip() -> Any:
    """Playwright's sync API for tests of pages in a real headless Chromium (Debian's, which
    .ci/run installs); the test is skipped where either is missing."""
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="Python Playwright is not installed")
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (.ci/run installs Debian's chromium)")
    return sync_api


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextlib.contextmanager
def report_page(path: Path, viewport: dict[str, int] | None = None,
                console_errors: bool = False) -> Iterator[tuple[Any, list[str]]]:
    """(the page of the HTML file ``path`` in headless Chromium, the JavaScript errors it
    raised: the caller asserts the list is empty where it should be); ``console_errors``
    also collects what the page logs as errors. Skipped where Playwright or Chromium is
    missing."""
    sync_api = playwright_or_skip()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport=viewport) if viewport else browser.new_page()
            errors: list[str] = []
            if console_errors:
                page.on("console", lambda m: errors.append(m.text) if m.type == "error"
                        else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(path.as_uri())
            yield page, errors
        finally:
            browser.close()


def two_device_csv(csv: Path, tmp_path: Path) -> Path:
    """A tt-metal profiler CSV of two devices from one device's: its first ops (signposts
    dropped) again as device 1, twice as slow and issued 1 ns later."""
    import pandas as pd

    df = pd.read_csv(csv).iloc[:120]
    df = df[df["OP TYPE"] != "signpost"]
    other = df.copy()
    other["DEVICE ID"] = 1
    other["DEVICE KERNEL DURATION [ns]"] = other["DEVICE KERNEL DURATION [ns]"] * 2
    other["HOST START TS"] = other["HOST START TS"] + 1
    path = tmp_path / "ops_perf_results_two.csv"
    pd.concat([df, other]).to_csv(path, index=False)
    return path


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures opatlas.bounds.plots would save, kept open (not written) so a test can
    read what was drawn."""
    import opatlas.bounds.plots as plots

    kept: list = []

    def keep(fig, path, option="--plot"):
        kept.append(fig)
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    return kept
