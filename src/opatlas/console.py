"""Tables on stdout: on a terminal at its width; in a pipe or a log (no width to fit) as wide
as they need, one line per row, every cell whole, instead of rich's 80 columns."""

from __future__ import annotations

from typing import IO, Any


def natural_width(renderable: Any) -> int:
    """The columns ``renderable`` takes when nothing has to wrap."""
    from rich.console import Console
    from rich.measure import Measurement

    wide = Console(width=100_000, file=None)
    return int(Measurement.get(wide, wide.options, renderable).maximum)


def print_wide(*renderables: Any, file: IO[str] | None = None) -> None:
    """Print ``renderables`` (tables, text) at the terminal's width, or unwrapped when the
    output is not a terminal."""
    from rich.console import Console

    console = Console(file=file)
    if not console.is_terminal:
        console = Console(file=file, width=max([console.width,
                                                *(natural_width(r) for r in renderables)]))
    for r in renderables:
        console.print(r)


def counted(n: int, noun: str) -> str:
    """``n`` and the noun, singular for one: "1 vector", "192 vectors"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
