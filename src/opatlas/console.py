"""Tables on stdout: on a terminal at its width; in a pipe or a log (no width to fit) as wide
as they need, one line per row, every cell whole, instead of rich's 80 columns."""

from __future__ import annotations

import functools
import os
import sys
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
    console = make_console(file=file)
    if not console.is_terminal:
        console = make_console(file=file, width=max([console.width,
                                                     *(natural_width(r) for r in renderables)]))
    for r in renderables:
        console.print(r)


def counted(n: int, noun: str) -> str:
    """``n`` and the noun, singular for one: "1 vector", "192 vectors"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def make_console(**options: Any) -> Any:
    """A rich ``Console(**options)`` for a command's output: when its reader goes away
    (``opatlas ... | head``) the command ends quietly with success, as Unix tools do, where
    rich's own console exits 1."""
    return _quiet_pipe_console()(**options)


@functools.cache
def _quiet_pipe_console() -> type:
    from rich.console import Console

    class QuietPipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            stdout_gone()
            raise SystemExit(0)

    return QuietPipeConsole


def stdout_gone() -> None:
    """The reader of standard output went away: point standard output at /dev/null, so that
    the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass


SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def fmt_si(v: float, unit: str) -> str:
    for scale, prefix in SI:
        if abs(v) >= scale:
            return f"{v / scale:.2f} {prefix}{unit}"
    return f"{v:.3g} {unit}".strip()
