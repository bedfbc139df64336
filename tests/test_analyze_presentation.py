"""How the analysis reads: the terminal app's keys as documented, the summary's labels and
values (units, unknowns, signs), the piped plain table, the notes on stderr and the mode of the
files the analyzer writes."""

from __future__ import annotations

import ast
import io
import itertools
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from opatlas.analyze import Analysis, Column, Source, api
from opatlas.analyze.tables import fmt, group_summary, op_label, summary_items
from opatlas.cli import main
from opatlas.devices import get_device
from opatlas.estimate import estimate_step, load_config
from opatlas.ops.batch import batch_counts
from opatlas.store import Store
from opatlas.store.db import ResultRow

TUI = REPO / "src" / "opatlas" / "analyze" / "tui.py"
DOCS = REPO / "docs" / "analyze.md"
LONG_OP = "matmul_with_a_rather_long_generated_name_that_never_fits"
# Textual's key names as a person types (and the docs write) them
TYPED = {"less_than_sign": "<", "greater_than_sign": ">", "left_square_bracket": "[",
         "right_square_bracket": "]", "escape": "Esc", "backspace": "Backspace",
         "enter": "Enter"}


def _analysis(summary: dict, rows: list[dict] | None = None) -> Analysis:
    rows = rows or [{"op": LONG_OP, "pass": "fwd", "calls": 1.0, "time_s": 2e-3, "flops": 1e9,
                     "bytes": 1e6, "bound_time_s": 1e-3, "limiter": "compute", "shape": {},
                     "group": 0}]
    return Analysis(Source(kind="config", path="x.yml"), summary, pd.DataFrame(rows),
                    [Column(key="op", label="op", role="id"),
                     Column(key="pass", label="pass", role="id"),
                     Column(key="time_s", label="time", role="estimated", unit="s"),
                     Column(key="limiter", label="limiter")], "stage")


# ---------------------------------------------------------------- the terminal app's keys

def _bound_keys() -> set[str]:
    """Every key a Binding(...) in tui.py names, as typed."""
    keys = set()
    for node in ast.walk(ast.parse(TUI.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Binding":
            key = node.args[0].value
            keys.add(TYPED.get(key, key))
    return keys


def _tui_docs() -> str:
    text = DOCS.read_text()
    return text[text.index("**Terminal app**"):text.index("**HTML report**")]


def test_docs_and_help_name_the_keys_as_bound():
    keys = _bound_keys()
    assert {"s", "e", "n", "p", "f", "r", "h", "q", "j", "k", "<", ">", "[", "]", "Esc",
            "Enter"} <= keys
    assert all(len(k) > 1 or not k.isalpha() or k.islower() for k in keys)  # lowercase, bound
    docs = _tui_docs()
    for key in keys:
        assert f"`{key}`" in docs, key
    # no capital letter keys (Shift+S ... does nothing): "S, E, N/P" is gone
    assert not re.search(r"(?<![\w`])[SENPFRHQ](?=[,/ )])", docs.replace("Shift", ""))
    pytest.importorskip("textual")
    from opatlas.analyze.tui import HELP

    plain = re.sub(r"\[/?b\]", "", HELP)
    for key in keys - {"Enter", "Esc", "Backspace"}:
        assert re.search(rf"(?<!\w){re.escape(key)}(?!\w)", plain), key
    assert not re.search(r"(?<!\w)[SENPFRHQ]  ", plain)
    readme = (REPO / "README.md").read_text()
    assert "h for keys" in readme and "H for keys" not in readme


# ---------------------------------------------------------------- the summary

def test_summary_labels_are_readable_with_units(tmp_path):
    a = api.analyze("llama2-7b")
    labels = [label for label, _, _ in summary_items(a)]
    assert labels[0] == "estimated step time"
    for want in ("peak bandwidth", "peak compute", "memory per GPU (GiB)", "on-chip buffer",
                 "samples/s"):
        assert want in labels
    assert not [x for x in labels if "_" in x or re.search(r" (s|gib|bytes s|flops s)$", x)]
    assert "step time s" not in labels and "predicted step time" not in labels  # said once
    html = api.write_html(a, tmp_path / "r.html").read_text()
    assert '"memory per GPU (GiB)"' in html and "memory gib" not in html
    assert "peak bytes s" not in html


def test_unknown_onchip_buffer_is_unknown_not_zero():
    for onchip in (0.0, None):
        items = dict((k, v) for k, v, _ in summary_items(_analysis({"onchip_bytes": onchip})))
        assert items["on-chip buffer"] == "unknown"
    items = dict((k, v) for k, v, _ in summary_items(_analysis({"onchip_bytes": 41943040})))
    assert items["on-chip buffer"] == "41.94 MB"


def test_an_absolute_error_has_no_sign_and_a_signed_one_has():
    a = _analysis({"estimation_error": 0.067,
                   "estimation_error_label": "median |error| (held out)"})
    assert ("median |error| (held out)", "6.7%") in [(k, v) for k, v, _ in summary_items(a)]
    a = _analysis({"estimation_error": -0.067})
    assert ("estimation error", "-6.7%") in [(k, v) for k, v, _ in summary_items(a)]


def test_the_bubble_is_not_named_twice():
    assert op_label("pipeline bubble", "bubble") == "pipeline bubble"
    assert op_label("linear1", "fwd") == "linear1 fwd"
    assert op_label("other", "-") == "other"
    rows = [{"op": "pipeline bubble", "pass": "bubble", "calls": 1.0, "time_s": 2.5,
             "flops": 0.0, "bytes": 0.0, "bound_time_s": None, "limiter": "bubble",
             "shape": {}, "group": 3},
            {"op": "linear1", "pass": "fwd", "calls": 1.0, "time_s": 0.2, "flops": 1e9,
             "bytes": 1e6, "bound_time_s": 0.1, "limiter": "compute", "shape": {}, "group": 3}]
    assert group_summary(_analysis({}, rows))["slowest_op"].tolist() == ["pipeline bubble"]


def test_measured_step_time_is_the_rows_sum_and_the_prediction_is_beside_it(tmp_path):
    est = estimate_step(load_config("llama2-7b"))
    item = next(i for i in est.items if i.name == "linear3" and i.pass_ == "fwd")
    with Store(tmp_path / "m.duckdb") as st:
        st.add_results([ResultRow("v1", "linear3", json.dumps({**dict(item.shape),
                                                                "dtype": "bf16"}),
                                  "fwd", "cuda", "NVIDIAH10080GBHBM3", "bf16", "ok", repeats=5,
                                  median_ns=2e-3 * 1e9)])
    a = api.analyze("llama2-7b", measured=tmp_path / "m.duckdb")
    items = {k: v for k, v, _ in summary_items(a)}
    from opatlas.analyze.tables import fmt_seconds

    assert items["step time (measured where stored)"] == fmt_seconds(a.rows["time_s"].sum())
    assert items["predicted step time"] == fmt_seconds(est.step_time_s)
    assert a.rows["time_s"].sum() != pytest.approx(est.step_time_s)
    # --json's summary says the same: the step with the measurements, the prediction beside it
    assert a.summary["step_time_s"] == pytest.approx(a.rows["time_s"].sum())
    assert a.summary["predicted_step_time_s"] == pytest.approx(est.step_time_s)


# ---------------------------------------------------------------- the piped table

def _trace(path: Path) -> Path:
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_a_rather_long_unmapped_operator_name",
         "pid": 1, "tid": 1, "ts": 20, "dur": 30,
         "args": {"Input Dims": [[4, 8]], "Input type": ["float"]}}]}
    path.write_text(json.dumps(doc))
    return path


def test_piped_table_keeps_every_cell_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    api.print_table(_analysis({}), file=out)
    text = out.getvalue()
    assert LONG_OP in text and "…" not in text
    assert all(line.count("│") in (0, 5) for line in text.splitlines())  # one line per row


def test_piped_trace_table_names_what_was_profiled(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = _trace(tmp_path / "t.json")
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(path)])
    assert exc.value.code in (0, None)
    out = capsys.readouterr().out
    assert "profiled as" in out and "…" not in out
    assert "aten::_a_rather_long_unmapped_operator_name" in out and "aten::mm" in out
    row = next(line for line in out.splitlines() if "aten::_a_rather" in line)
    assert "other" in row


# ---------------------------------------------------------------- notes on stderr

def _cpu_store(path: Path, device: str = "Some Lab CPU") -> Path:
    """A store of 24 linears on a device the catalog does not know (enough to hold rows out)."""
    shapes = pd.DataFrame([{"role": "qkv", "mp": mp, "b": b, "l": l, "dim": d}
                           for mp, b, l, d in itertools.product((1, 2), (1, 2), (512, 1024, 2048),
                                                                (1024, 2048))])
    c = batch_counts("linear", shapes.assign(dtype="fp32"))
    ref = get_device("A100")
    seconds = 50 * np.maximum(c["flops_fwd"] / ref.peak("fp32"), c["bytes_fwd"] / ref.bandwidth)
    with Store(path) as st:
        st.add_results([ResultRow(f"v{i}", "linear", json.dumps({**s, "dtype": "fp32"}), "fwd",
                                  "cpu", device, "fp32", "ok", repeats=5, median_ns=float(t) * 1e9,
                                  flops=float(f), min_bytes=float(b))
                        for i, (s, t, f, b) in enumerate(zip(shapes.to_dict("records"), seconds,
                                                            c["flops_fwd"], c["bytes_fwd"],
                                                            strict=True))])
    return path


def test_a_cpu_store_says_why_it_has_no_orojenesis_bound(tmp_path, capsys):
    store = _cpu_store(tmp_path / "cpu.duckdb")
    a = api.analyze(store)  # an empirical device: said in the notes (not also warned)
    assert any("not in the catalog" in n for n in a.summary["notes"])
    assert a.rows["orojenesis_bytes"].isna().all()
    said = [n for n in a.summary["notes"] if "no Orojenesis bound" in n]
    assert len(said) == 1 and "on-chip" in said[0]
    assert dict((k, v) for k, v, _ in summary_items(a))["on-chip buffer"] == "unknown"
    for strict in ([], ["--strict"]):  # like the empirical roofline: said, not refused
        with pytest.raises(SystemExit) as exc:
            main(["analyze", str(store), "--json", *strict])
        assert exc.value.code in (0, None)
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if "no Orojenesis bound" in x]
        assert len(lines) == 1 and lines[0].startswith("opatlas: note: ")


# ---------------------------------------------------------------- files

@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_written_files_get_the_usual_mode(tmp_path, mask):
    a = _analysis({"title": "t"})
    old = os.umask(mask)
    try:
        paths = [api.write_html(a, tmp_path / "r.html"), api.write_csv(a, tmp_path / "r.csv"),
                 a.save(tmp_path / "a.json")]
    finally:
        os.umask(old)
    for p in paths:
        assert p.stat().st_mode & 0o777 == 0o666 & ~mask, p


def test_shape_parameters_read_as_numbers_not_floats():
    shape = {"bytes": 4344383488.0, "overlapped_s": 0.05510339394786615, "ranks": 32,
             "role": "gradients", "p": 0.1}
    assert fmt(shape, None) == "bytes=4344383488 overlapped_s=0.0551 ranks=32 role=gradients p=0.1"
