"""``opatlas demo``: the main job on bundled data, in one command."""

from __future__ import annotations

from pathlib import Path

import typer


def demo(
    out: Path = typer.Option(Path("opatlas-demo"), "--out", help="Folder for the store and report."),
    repeats: int | None = typer.Option(None, "--repeats", min=1, help="Override repeats."),
) -> None:
    """Run a small CPU sweep of the core ops, store it, and print a summary and where it is.

    Example:

        opatlas demo --out /tmp/demo
    """
    from opatlas.demo import run_demo
    run_demo(out, repeats=repeats)
