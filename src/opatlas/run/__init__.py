"""Drive a sweep on a backend: warm-up, repeats, robust statistics, crash/hang isolation,
resume, progress with ETA, parts."""

from opatlas.run.runner import RunConfig, Runner, RunSummary, run_spec
from opatlas.run.stats import summarize

__all__ = ["RunConfig", "RunSummary", "Runner", "run_spec", "summarize"]
