"""The analysis: one table of rows (an op, a collective, a schedule term ...) with the figures
that explain its time, a summary, and the description of its columns. Every source (a training
config, a results store, a profiler trace, a PyBuda run, a tt-metal profiler CSV) builds one;
every view (terminal app, HTML report, trace export, JSON, CSV) shows one.

Saved as JSON, never pickle: loading a file runs no code."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from opatlas.atomic import write_atomic
from opatlas.errors import OpatlasError

FORMAT_VERSION = 1
# the columns every row has, whatever its source (the `--json` contract)
REQUIRED_COLUMNS = ("op", "pass", "calls", "time_s", "flops", "bytes", "bound_time_s", "limiter",
                    "shape")
LIMITERS = ("compute", "memory", "communication", "bubble", "overhead", "unknown")
Role = Literal["id", "group", "count", "time", "measured", "estimated", "bound", "util", "error",
               "rate", "ratio", "text", "shape"]


class Column(BaseModel):
    """How a view shows a column: its label, unit and role. Roles drive highlighting:
    ``util`` green above 50%, red below 25%; ``error`` yellow at 20% off, red at 50%."""

    model_config = ConfigDict(extra="forbid")
    key: str
    label: str
    role: Role = "text"
    unit: str = ""
    help: str = ""


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str
    path: str


class _AnalysisFile(BaseModel):
    """The saved form, validated on load."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["opatlas-analysis"] = "opatlas-analysis"
    version: int = Field(FORMAT_VERSION, le=FORMAT_VERSION)
    source: Source
    summary: dict[str, Any]
    columns: list[Column]
    group_label: str
    rows: list[dict[str, Any]]


@dataclass
class Analysis:
    """``rows``: one per row with at least REQUIRED_COLUMNS (and ``group``: the pipeline stage,
    epoch or device it belongs to, or None); ``summary`` has at least ``total_time_s``: the
    sum of the rows' ``time_s`` unless the source says what the rows take together (pipelined
    epochs: each epoch's slowest op, summed; ``group_times_s`` then gives each group's)."""

    source: Source
    summary: dict[str, Any]
    rows: pd.DataFrame
    columns: list[Column] = field(default_factory=list)
    group_label: str = "stage"

    def __post_init__(self) -> None:
        missing = [c for c in REQUIRED_COLUMNS if c not in self.rows.columns]
        if missing:
            raise OpatlasError(f"analysis of {self.source.path} lacks the columns {missing}")
        if "group" not in self.rows.columns:
            self.rows = self.rows.assign(group=None)
        if "total_time_s" not in self.summary:
            self.summary = {**self.summary, "total_time_s": float(self.rows["time_s"].sum())}

    @property
    def total_time_s(self) -> float:
        return float(self.summary["total_time_s"])

    def groups(self) -> list[Any]:
        """The stages, epochs or devices, in order of first appearance."""
        return list(dict.fromkeys(self.rows["group"].tolist()))

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source.model_dump(), "summary": _clean(self.summary),
                "columns": [c.model_dump() for c in self.columns],
                "group_label": self.group_label,
                "rows": [_clean(r) for r in self.rows.to_dict("records")]}

    def document(self) -> dict[str, Any]:
        """What ``--save`` writes and ``--json`` prints: either opens again with ``--load``."""
        return {"format": "opatlas-analysis", "version": FORMAT_VERSION, **self.to_json()}

    def save(self, path: str | Path) -> Path:
        path = Path(path)  # written whole: a reader never sees half a file
        return write_atomic(path, json.dumps(self.document()), "--save")

    @classmethod
    def load(cls, path: str | Path) -> Analysis:
        path = Path(path)
        try:
            doc = _AnalysisFile.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise OpatlasError(f"{path}: no such analysis file") from None
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err["loc"]) or "(top level)"
            raise OpatlasError(f"{path} is not an opatlas analysis saved with --save: key "
                               f"'{key}': {err['msg']}") from None
        rows = pd.DataFrame(doc.rows) if doc.rows else pd.DataFrame(columns=REQUIRED_COLUMNS)
        return cls(doc.source, doc.summary, rows, doc.columns, doc.group_label)


def _clean(value: Any) -> Any:
    """JSON-safe: NaN becomes null, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
