"""Drive a sweep on a backend: warm-up, repeats, robust statistics, crash/hang isolation,
resume, progress with ETA, parts; on one machine, or on a Ray cluster
(``opatlas.run.ray_executor``, which needs the ``ray`` extra).

The names below are imported on first use: the guarded worker process imports
``opatlas.run.worker`` (through this package) on every start, and must not pay for the runner,
the store and pandas (half a second) each time a crash or a timeout restarts it."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opatlas.run.runner import NodeStats, RunConfig, Runner, RunSummary, run_spec
    from opatlas.run.stats import summarize

_WHERE = {"NodeStats": "runner", "RunConfig": "runner", "RunSummary": "runner",
          "Runner": "runner", "run_spec": "runner", "summarize": "stats"}

__all__ = ["NodeStats", "RunConfig", "RunSummary", "Runner", "run_spec", "summarize"]


def __getattr__(name: str) -> Any:
    """An export, or a submodule (``opatlas.run.runner``), imported on first use."""
    if name in _WHERE:
        return getattr(import_module(f"opatlas.run.{_WHERE[name]}"), name)
    try:
        return import_module(f"opatlas.run.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"opatlas.run.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
