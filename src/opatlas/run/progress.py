"""Progress on long work: a rich bar on a terminal, otherwise a log line every N vectors or
every ``LOG_SECONDS``, whichever comes first (slow vectors never leave a log silent)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any, TextIO


def format_eta(seconds: float) -> str:
    seconds = max(0, int(seconds))
    d, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}d{h}h{m:02d}m{s:02d}s" if d else f"{h}h{m:02d}m{s:02d}s"


LOG_SECONDS = 30.0


class Progress:
    def __init__(self, total: int | None, *, label: str, interactive: bool | None = None,
                 log_every: int = 100, stream: TextIO | None = None, unit: str = "vec") -> None:
        """``unit``: what ``total`` counts (vectors; rows ...), as the rate shows it;
        ``total`` None: not known ahead (counted as it goes, without an ETA)."""
        self.total, self.label, self.log_every = total, label, max(1, log_every)
        self.unit = unit
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.done = 0
        self.detail = ""
        self._next_log = self.log_every
        self.status: Counter[str] = Counter()
        self.t0 = time.monotonic()
        self._last_log = self.t0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.interactive and self.total != 0:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = __import__("rich.progress").progress.Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn(f"{{task.fields[rate]:.1f}} {self.unit}/s"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[stat]}"),
                console=Console(file=self.stream),
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, rate=0.0, stat="")
        return self

    def rate(self) -> float:
        elapsed = time.monotonic() - self.t0
        return self.done / elapsed if elapsed > 0 else 0.0

    def grow(self, count: int) -> None:
        """``count`` more vectors to do (work found after the start, e.g. a new device type)."""
        if self.total is None:
            return
        self.total += count
        if self._bar is not None:
            self._bar.update(self._task, total=self.total)

    def advance(self, status: str, count: int = 1, detail: str | None = None) -> None:
        """``count`` more vectors ended with ``status``; ``detail`` (e.g. per-node counts)
        replaces the previous one on the bar and in the log lines."""
        self.done += count
        self.status[status] += count
        if detail is not None:
            self.detail = detail
        stat = " ".join(f"{k} {v}" for k, v in sorted(self.status.items()))
        if self.detail:
            stat = f"{stat} | {self.detail}"
        if self._bar is not None:
            self._bar.update(self._task, advance=count, rate=self.rate(), stat=stat)
        elif self.done >= self._next_log or self.done == self.total or \
                time.monotonic() - self._last_log >= LOG_SECONDS:
            self._next_log = (self.done // self.log_every + 1) * self.log_every
            self._last_log = time.monotonic()
            self._log(stat)

    def _log(self, stat: str) -> None:
        rate = self.rate()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        if self.total is None:
            print(f"[{stamp}] {self.label} | {self.done:,} so far | {rate:.2f} {self.unit}/s"
                  + (f" | {stat}" if stat else ""), file=self.stream, flush=True)
            return
        eta = (self.total - self.done) / rate if rate else 0.0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        print(f"[{stamp}] {self.label} | {self.done}/{self.total}={pct:.2f}% | "
              f"{rate:.2f} {self.unit}/s | ETA {format_eta(eta)} | {stat}",
              file=self.stream, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
