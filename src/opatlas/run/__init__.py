"""Drive a sweep on a backend: warm-up, repeats, robust statistics, crash/hang isolation,
resume, progress with ETA, parts; on one machine, or on a Ray cluster
(``opatlas.run.ray_executor``, which needs the ``ray`` extra)."""

from opatlas.run.runner import NodeStats, RunConfig, Runner, RunSummary, run_spec
from opatlas.run.stats import summarize

__all__ = ["NodeStats", "RunConfig", "RunSummary", "Runner", "run_spec", "summarize"]
