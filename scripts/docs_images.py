"""Regenerate the README's two pictures of ``opatlas analyze llama2-70b`` from today's code.

    .venv/bin/python scripts/docs_images.py            # writes docs/analyze-tui.png and
                                                       # docs/analyze-report.png

The terminal app's stage table is Textual's own SVG screenshot (taken headless, as the tests
drive the app), and the HTML report is the file ``--html`` writes; Debian's ``chromium``
renders both to PNG. Needs ``chromium`` on PATH (``apt-get install chromium``).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--force-device-scale-factor=1", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]


def tui_svg(analysis, size: tuple[int, int] = (140, 36)) -> str:
    """The stage table (key ``e``) as Textual's SVG screenshot."""
    from opatlas.analyze.tui import AnalyzerApp

    async def shoot() -> str:
        app = AnalyzerApp(analysis)
        async with app.run_test(size=size) as pilot:
            await pilot.press("e")
            await pilot.pause()
            return app.export_screenshot()

    return asyncio.run(shoot())


def render(chromium: str, page: Path, png: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}",
                        f"--window-size={width},{height}", f"--screenshot={png}",
                        page.as_uri()], check=True, capture_output=True, timeout=120)
    print(png)


def main() -> int:
    chromium = shutil.which("chromium")
    if chromium is None:
        print("docs_images: chromium is not on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    from opatlas.analyze import api

    analysis = api.analyze("llama2-70b")
    with tempfile.TemporaryDirectory() as tmp:
        svg = Path(tmp) / "tui.svg"
        svg.write_text(tui_svg(analysis))
        render(chromium, svg, DOCS / "analyze-tui.png", 1400, 800)
        html = api.write_html(analysis, Path(tmp) / "report.html")
        render(chromium, html, DOCS / "analyze-report.png", 1200, 1250)
    return 0


if __name__ == "__main__":
    sys.exit(main())
