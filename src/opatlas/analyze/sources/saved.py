"""An analysis kept with ``--save``: ``opatlas analyze a.json`` opens it like ``--load``."""

from __future__ import annotations

from pathlib import Path

from opatlas.analyze.model import Analysis
from opatlas.analyze.sources import ReadOptions, SourceKind, register


def detect(path: Path) -> bool:
    if path.suffix != ".json" or not path.is_file():
        return False
    with path.open("rb") as fh:
        return b'"opatlas-analysis"' in fh.read(256)


def read(path: Path, options: ReadOptions) -> Analysis:
    return Analysis.load(path)


register(SourceKind("analysis", detect, read, "an analysis kept with --save (.json)"))
