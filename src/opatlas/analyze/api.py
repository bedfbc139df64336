"""The analyzer's Python API: read a source into an Analysis, then show it any way."""

from __future__ import annotations

import csv as csvlib
import json
from pathlib import Path
from typing import IO, Any

from opatlas.analyze.model import Analysis
from opatlas.analyze.sources import ReadOptions, read
from opatlas.atomic import write_atomic
from opatlas.errors import OpatlasError


def analyze(source: str | Path, *, kind: str | None = None, measured: str | Path | None = None,
            models: str | Path | None = None, device: str | None = None,
            strict: bool = False, extra: dict[str, Any] | None = None) -> Analysis:
    """The analysis of a config, a store, a trace, a PyBuda run or netlist, or a tt-metal
    profiler CSV (the kind is detected unless given); ``extra``: kind-specific options
    (PyBuda: netlist, dir, spatial_epochs; tt-metal: start/end_signpost, ignore_signposts)."""
    path = Path(source)
    if (path.suffix or len(path.parts) > 1) and not path.exists() and kind is None \
            and not _bundled_config(path):
        raise OpatlasError(f"{path}: no such file or folder (opatlas analyze reads a training "
                           f"config or bundled config name, a results store, a profiler trace, "
                           f"a PyBuda run or a tt-metal profiler CSV)")
    extra = {**({"device": device} if device else {}), **(extra or {})}
    analysis = read(source, kind, ReadOptions(measured=None if measured is None else Path(measured),
                                              models=None if models is None else Path(models),
                                              strict=strict, extra=extra))
    return said_below_bound(analysis)


# the sources whose rows go through why.explain (flagged there): what their times are called
# and what may put them under their bound (PyBuda flags its rows and says them itself)
BELOW_BOUND_WHY = {
    "store": ("measurement(s)", "their data may have stayed in the cache between repetitions, "
                                "or the timer is coarser than the kernel"),
    "trace": ("profiled row(s)", "the FLOPs or bytes counted for the op may exceed what its "
                                 "kernels did (a fused or specialised kernel), the device may not "
                                 "be the one whose peaks are used (--device), or the time misses "
                                 "part of the work (another stream or thread)"),
    "ttmetal": ("device time(s)", "the FLOPs tt-perf-report counts, or the DRAM bytes opatlas "
                                  "counts from the row's tensor columns, may exceed what its "
                                  "kernels did (the row's shapes may not be the work they "
                                  "did), or the chip is not the one whose peaks are used"),
    "config": ("row(s)", "a measured time (--measured) may have kept its data in the cache "
                         "between repetitions or have a timer coarser than the kernel, a "
                         "predicted one comes from a model that undershoots; the step time "
                         "and MFU include them"),
}


def said_below_bound(analysis: Analysis) -> Analysis:
    """The analysis with one note on its rows under their bound (why.below_bound_notes), for
    the sources whose rows why.explain flagged."""
    from opatlas.analyze.why import below_bound_notes

    if analysis.source.kind not in BELOW_BOUND_WHY:
        return analysis
    what, why = BELOW_BOUND_WHY[analysis.source.kind]
    notes = list(analysis.summary.get("notes") or [])
    # a saved analysis (--load) has the note already: the same rows give the same words
    said = [n for n in below_bound_notes(analysis.rows, what, why) if n not in notes]
    if said:
        analysis.summary["notes"] = [*notes, *said]
    return analysis


def load(path: str | Path) -> Analysis:
    """A saved analysis (``--save``), its rows checked as ``--load`` checks them."""
    from opatlas.analyze.sources.saved import load as load_checked

    return load_checked(path)


def write_csv(analysis: Analysis, path: str | Path) -> Path:
    """The rows as CSV; mappings (shape) as JSON text, counts such as ``calls`` (float
    columns holding whole numbers only) as integers."""
    rows = analysis.rows.copy()
    for col in rows.columns:
        if rows[col].map(lambda v: isinstance(v, dict | list)).any():
            rows[col] = rows[col].map(lambda v: json.dumps(v) if isinstance(v, dict | list) else v)
        elif _whole_floats(rows[col]):
            rows[col] = rows[col].astype("Int64")
    return write_atomic(path, rows.to_csv(index=False, quoting=csvlib.QUOTE_MINIMAL), "--csv")


def _whole_floats(col: Any) -> bool:
    """A float column whose values are all whole numbers (missing ones allowed) that fit an
    int64 exactly."""
    import numpy as np

    if col.dtype.kind != "f":
        return False
    values = col.dropna().to_numpy()
    return bool(len(values)) and bool(np.all(np.isfinite(values) & (values == np.round(values))
                                             & (np.abs(values) < 2.0**53)))


def write_html(analysis: Analysis, path: str | Path) -> Path:
    """Write ``analysis`` as one self-contained HTML report (``opatlas analyze --html``) to
    ``path``, atomically (a file there is replaced whole or left as it was); the path
    written. A path that cannot be written raises :class:`OpatlasError`."""
    from opatlas.analyze.html import render

    return write_atomic(path, render(analysis), "--html")


def _bundled_config(path: Path) -> bool:
    """A bundled config's name with a dot in it (``qwen2.5-7b``), not a missing file."""
    from opatlas.analyze.sources.config import bundled

    return len(path.parts) == 1 and bundled(path.name)


def write_trace(analysis: Analysis, path: str | Path) -> Path:
    """The estimated step as a Chrome/Perfetto trace: configs only (it needs the schedule)."""
    if analysis.source.kind != "config":
        raise OpatlasError(f"--trace exports an estimated step: it needs a training config, "
                           f"not a {analysis.source.kind} ({analysis.source.path})")
    from opatlas.analyze.perfetto import write_trace as perfetto_trace
    from opatlas.analyze.sources.config import estimate_of

    # the layout the analysis shows: its estimate options (--gpus, --set ...) applied again
    return Path(perfetto_trace(estimate_of(analysis), Path(path)) or path)


def print_table(analysis: Analysis, top: int = 25, file: IO[str] | None = None) -> None:
    """A plain table of the slowest rows, for pipes and logs. Not on a terminal (a pipe, a
    log), the table takes the width it needs: one line per row, every cell whole; it is
    rendered first and written in one go, so that a reader leaving early (``| head``) is a
    BrokenPipeError for the caller (rich's console would exit 1 on it)."""
    import io
    import sys

    from rich.text import Text

    from opatlas.analyze.tables import rich_table, summary_items
    from opatlas.console import print_wide

    totals = [Text(f"{label}: {value}") for label, value, _ in summary_items(analysis)]
    out = file if file is not None else sys.stdout
    if out.isatty():
        print_wide(*totals, rich_table(analysis, top), file=file)  # the totals first
        return
    text = io.StringIO()
    print_wide(*totals, rich_table(analysis, top), file=text)
    out.write(text.getvalue())
    out.flush()


def run_app(analysis: Analysis, **reload_args: Any) -> None:
    try:
        from opatlas.analyze.tui import AnalyzerApp
    except ImportError as exc:
        raise OpatlasError(f"the terminal app needs Textual: pip install 'opatlas[tui]' "
                           f"({exc})") from None
    AnalyzerApp(analysis, reload_args).run()
