"""Performance analysis: measured vs predicted vs bound, per op, and why (ARCHITECTURE.md:
the stage on top; it reads estimate, predict, bounds and store, and none of them reads it)."""

from opatlas.analyze.model import REQUIRED_COLUMNS, Analysis, Column, Source

__all__ = ["REQUIRED_COLUMNS", "Analysis", "Column", "Source"]
