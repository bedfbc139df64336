"""The analysis table model: required columns, totals, and a JSON round trip that runs no code."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from opatlas.analyze import Analysis, Column, Source
from opatlas.errors import OpatlasError


def _analysis() -> Analysis:
    rows = pd.DataFrame([
        {"op": "linear1", "pass": "fwd", "calls": 4.0, "time_s": 0.25, "flops": 1e12,
         "bytes": 2e9, "bound_time_s": 0.2, "limiter": "compute", "shape": {"b": 1, "l": 4096},
         "group": 0},
        {"op": "pipeline bubble", "pass": "bubble", "calls": 1.0, "time_s": 0.5,
         "flops": float("nan"), "bytes": None, "bound_time_s": None, "limiter": "bubble",
         "shape": {}, "group": 0}])
    return Analysis(Source(kind="config", path="x.yml"), {"step_time_s": 0.75}, rows,
                    [Column(key="time_s", label="time", role="time", unit="s")])


def test_total_is_the_sum_of_rows_and_round_trip_is_exact(tmp_path):
    a = _analysis()
    assert a.total_time_s == pytest.approx(0.75)
    assert a.groups() == [0]
    b = Analysis.load(a.save(tmp_path / "a.json"))
    assert b.to_json() == a.to_json()
    assert b.rows.loc[0, "shape"] == {"b": 1, "l": 4096}
    assert b.rows.loc[1, "flops"] is None or math.isnan(b.rows.loc[1, "flops"])


def test_missing_columns_and_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(OpatlasError, match=r"lacks the columns \['limiter', 'shape'\]"):
        Analysis(Source(kind="x", path="p"), {}, pd.DataFrame(
            [{"op": "a", "pass": "fwd", "calls": 1, "time_s": 1, "flops": 0, "bytes": 0,
              "bound_time_s": None}]))
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "opatlas-analysis", "version": 1, "source": {"kind": "x"}}')
    with pytest.raises(OpatlasError, match=r"bad.json is not an opatlas analysis.*source.path"):
        Analysis.load(bad)
    newer = _analysis().save(tmp_path / "n.json")
    newer.write_text(newer.read_text().replace('"version": 1', '"version": 99'))
    with pytest.raises(OpatlasError, match="version"):
        Analysis.load(newer)
