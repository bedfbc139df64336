"""The Python API's review (s36): RunConfig's checks, expand of a path, Predictor.predict's
shape checks, and the docstrings help() shows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from opatlas.analyze.api import write_html
from opatlas.errors import InvalidShape, OpatlasError
from opatlas.run.runner import RunConfig, RunSummary, measurement
from opatlas.spec import resolve_spec
from opatlas.store.db import Store
from opatlas.sweep import expand
from opatlas.sweep.expand import Expansion

LINEAR = Path(__file__).resolve().parents[1] / "examples" / "specs" / "linear.yml"
SHAPE = {"mp": 2, "b": 4, "l": 4096, "dim": 4096}


# -- 7. RunConfig validates its fields -----------------------------------------------------------
@pytest.mark.parametrize(("field", "value"), [
    ("repeats", -1), ("repeats", 0), ("repeats", 2.5), ("repeats", "5"), ("repeats", True),
    ("warmup", -1), ("timeout_s", 0), ("timeout_s", -3.0), ("timeout_s", "fast"),
    ("flush_every", 0), ("flush_seconds", -1.0), ("log_every", 0),
])
def test_run_config_refuses_bad_values(field: str, value: object) -> None:
    with pytest.raises(OpatlasError) as exc:
        RunConfig(**{field: value})  # type: ignore[arg-type]
    assert f"{field}={value!r}" in str(exc.value)


def test_run_config_takes_the_cli_minimums_and_none() -> None:
    RunConfig(repeats=1, warmup=0, timeout_s=0.01, flush_every=1, flush_seconds=0, log_every=1)
    cfg = RunConfig(repeats=None, warmup=None, timeout_s=30)
    assert (cfg.repeats, cfg.warmup) == (None, None)


def test_measurement_takes_the_specs_repeats_only_for_none() -> None:
    spec = resolve_spec(str(LINEAR))
    assert measurement(spec, RunConfig()).repeats == spec.repeats
    assert measurement(spec, RunConfig(repeats=3)).repeats == 3


# -- 8. wrong argument types --------------------------------------------------------------------
@pytest.mark.parametrize("as_given", [str, lambda p: p])
def test_expand_takes_a_spec_path(as_given: object) -> None:
    want = expand(resolve_spec(str(LINEAR))).summary()
    assert expand(as_given(LINEAR)).summary() == want  # type: ignore[operator]


def test_expand_refuses_what_is_no_spec() -> None:
    with pytest.raises(OpatlasError, match=r"spec=5 \(int\): expected a SweepSpec"):
        expand(5)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def predictor():  # type: ignore[no-untyped-def]
    from opatlas.predict import Predictor

    return Predictor()


def test_predict_names_a_none_value(predictor) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidShape, match="b=None: b must be a number, not NoneType"):
        predictor.predict("linear1", {**SHAPE, "b": None})
    with pytest.raises(InvalidShape, match="row 1 of 2: b=None"):
        predictor.predict("linear1", {**SHAPE, "mp": [2, 2], "b": [4, None]})


def test_predict_names_a_number_given_as_text(predictor) -> None:  # type: ignore[no-untyped-def]
    df = pd.DataFrame({k: [v] for k, v in SHAPE.items()}).astype({"mp": str})
    with pytest.raises(InvalidShape, match="mp='2': mp must be a number, not str") as exc:
        predictor.predict("linear1", df)
    assert "dim % mp" not in str(exc.value)


def test_predict_still_takes_a_good_shape(predictor) -> None:  # type: ignore[no-untyped-def]
    assert predictor.predict("linear1", SHAPE)[0] > 0


# -- 10. docstrings ------------------------------------------------------------------------------
def test_run_config_and_summary_document_their_fields() -> None:
    for name in ("backend", "repeats", "warmup", "timeout_s", "passes", "retry_failed",
                 "flush_every", "flush_seconds", "log_every", "interactive", "ops_modules",
                 "backend_options"):
        assert f"``{name}``" in (RunConfig.__doc__ or ""), name
    for name in ("total", "skipped", "ran", "statuses", "elapsed_s", "nodes", "retried_chunks",
                 "duplicate_rows", "failed_earlier", "not_run", "failed_tasks", "notes"):
        assert f"``{name}``" in (RunSummary.__doc__ or ""), name


@pytest.mark.parametrize("fn", [write_html, Store.count, Store.table, Store.transaction,
                                Store.done_vector_ids, Expansion.summary])
def test_api_functions_have_docstrings(fn: object) -> None:
    assert (getattr(fn, "__doc__", None) or "").strip()
