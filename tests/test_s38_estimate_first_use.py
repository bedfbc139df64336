"""Session 38: data mode says on stderr that it fits models on first use (and nothing once they
are cached), a whole run's short times and GPU-hours keep their digits, and a Hugging Face
config.json of an unsupported model_type names that field, not ``architectures``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import cli_in_process
from opatlas.cli.estimate_run import duration, run_lines, significant
from opatlas.errors import SpecError
from opatlas.estimate.optimes import FitProgress
from opatlas.estimate.run import whole_run
from opatlas.predict import Predictor

REPO = Path(__file__).resolve().parents[1]
# every op of llemma_7b_4_2_2_P but res_add is timed by the roofline: two quick fits
ROOFLINE = ("ops.roofline=[RMSlayernorm,RoPE,flash_atten,gelu,linear,parallel_cross_entropy_128,"
            "embedding,middleStage_optimizer]")


def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process starts with: no predictor holding models, the note not yet said."""
    monkeypatch.setattr(Predictor, "_shared", {})
    monkeypatch.setattr(FitProgress, "noted", False)


def _fit_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if "fitting" in ln]


def test_first_use_says_it_fits_models_and_a_warm_cache_says_nothing(capsys, monkeypatch,
                                                                        tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = ("estimate", "llemma_7b_4_2_2_P", "--json", "--set", ROOFLINE)
    _fresh_process(monkeypatch)
    code, cold_out, cold_err = cli_in_process(capsys, *args)
    assert code == 0, cold_err
    lines = _fit_lines(cold_err)
    note = next(ln for ln in lines if ln.startswith("opatlas: note:"))
    assert "fitting runtime models on first use" in note and "(first res_add fwd)" in note
    assert str(tmp_path / "cache") in note and "for next time" in note
    # not a terminal: a line per model, counting them and naming each
    progress = [ln for ln in lines if "fitting models |" in ln]
    assert [ln.split(" | ")[1] for ln in progress] == ["1 so far", "2 so far"]
    assert "res_add fwd in" in progress[0] and "res_add bwd in" in progress[1]
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*.joblib")) == \
        ["bwd.joblib", "fwd.joblib"]

    _fresh_process(monkeypatch)  # a second process: the models come from the cache on disk
    code, warm_out, warm_err = cli_in_process(capsys, *args)
    assert code == 0, warm_err
    assert _fit_lines(warm_err) == [] and "first use" not in warm_err
    assert json.loads(cold_out) == json.loads(warm_out)  # stdout: the JSON alone, the same
    assert cold_out == warm_out


def test_the_note_is_said_once_per_process(capsys, monkeypatch, tmp_path):
    """A second fit in the same process (a new estimate, new models) shows its progress
    but not the note again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _fresh_process(monkeypatch)
    FitProgress.noted = True  # said by an earlier estimate of this process
    code, out, err = cli_in_process(capsys, "estimate", "llemma_7b_4_2_2_P", "--json",
                                    "--set", ROOFLINE)
    assert code == 0, err
    assert "first use" not in err
    assert len([ln for ln in _fit_lines(err) if "fitting models |" in ln]) == 2
    json.loads(out)


# --- whole runs: short ones keep their digits ------------------------------------------------

def _est(step_s: float, gpus: int = 64, batch: int = 1024, seq: int = 4096) -> SimpleNamespace:
    """What :func:`whole_run` reads of an estimate."""
    cfg = SimpleNamespace(training=SimpleNamespace(global_batch=batch),
                          model=SimpleNamespace(seq_len=seq), gpus=gpus)
    return SimpleNamespace(config=cfg, step_time_s=step_s)


def test_a_one_step_run_shows_seconds_and_gpu_hours_with_digits():
    # 100 tokens -> 1 step of 1024 * 4096 = 4,194,304 tokens; 5 s on 64 GPUs
    # = 5 * 64 / 3600 = 0.08888... GPU-hours; at 2 per GPU-hour 0.17777...
    run = whole_run(_est(5.0), tokens=100, gpu_hour_price=2.0)
    assert (run.steps, run.tokens) == (1, 4194304.0)
    assert run.gpu_hours == pytest.approx(5 * 64 / 3600, rel=1e-15)  # full precision kept
    assert run_lines(run, 2.0) == [
        "whole run: 4.19M tokens in 1 step of 4.19M tokens",
        "  5.00 seconds   0.0889 GPU-hours   cost 0.178 at 2 per GPU-hour"]


def test_a_long_run_shows_days_and_whole_gpu_hours():
    # 2T tokens / 4,194,304 per step = 476,837.16 -> 476,838 steps (2.0000007T tokens) of
    # 5 s = 2,384,190 s = 27.594 days; GPU-hours 2,384,190 * 64 / 3600 = 42,385.6
    run = whole_run(_est(5.0), tokens=2e12)
    assert run.steps == 476838
    assert run_lines(run, None) == [
        "whole run: 2T tokens in 476,838 steps of 4.19M tokens",
        "  27.59 days   42,386 GPU-hours"]


@pytest.mark.parametrize(("seconds", "shown"), [
    (1.0, "1.00 seconds"), (0.25, "0.250 seconds"), (90.0, "1.50 minutes"), (60.0, "1.00 minutes"),
    (7200.0, "2.00 hours"), (5000.0, "1.39 hours"), (86400.0, "1.00 days"),
    (86400.0 * 3.456, "3.46 days")])
def test_durations_under_a_day_use_hours_minutes_seconds(seconds, shown):
    """Three significant digits, trailing zeros kept (1.00 minutes: plural, as decimals are)."""
    assert duration(seconds) == shown


@pytest.mark.parametrize(("x", "shown"), [
    (0.0888888, "0.0889"), (12.345, "12.3"), (123.45, "123"), (999.7, "1,000"),
    (42385.6, "42,386"), (0.0, "0")])
def test_significant_digits(x, shown):
    assert significant(x) == shown


def test_cli_short_run_text_matches_its_json_step_time(capsys, monkeypatch, tmp_path):
    """End to end (the roofline: no fits): the text's numbers follow from the JSON's step."""
    from opatlas.estimate.config import load_config

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--analytical",
                                    "--tokens", "100", "--json")
    assert code == 0, err
    data = json.loads(out)
    step, run, gpus = data["step_time_s"], data["run"], load_config("llama2-7b").gpus
    assert (run["steps"], gpus) == (1, 64)
    assert run["gpu_hours"] == pytest.approx(step * gpus / 3600, rel=1e-12)  # not rounded
    code, text, err = cli_in_process(capsys, "estimate", "llama2-7b", "--analytical",
                                     "--tokens", "100")
    assert code == 0, err
    assert "in 1 step of 4.19M tokens" in text
    assert f"  {duration(step)}   {significant(step * gpus / 3600)} GPU-hours" in text
    assert " 0 GPU-hours" not in text and "0.00 days" not in text


# --- Hugging Face configs ---------------------------------------------------------------------

def test_an_unsupported_model_type_is_named_not_the_architectures_field(tmp_path):
    from opatlas.estimate.config import load_config

    base = json.loads((REPO / "src/opatlas/data/hf/llama-3.1-8b.json").read_text())
    assert base["architectures"] == ["LlamaForCausalLM"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**base, "model_type": "bert"}))
    with pytest.raises(SpecError) as info:
        load_config(p)
    msg = str(info.value)
    assert (info.value.key, info.value.value) == ("model_type", "bert")
    assert msg.startswith(f"In file {p}, key 'model_type', value 'bert': model_type 'bert' names "
                          f"an unsupported architecture (the family is read from model_type, "
                          f"not from architectures: LlamaForCausalLM); supported model types: ")
    assert "llama, mistral" in msg and "unsupported architecture (LlamaForCausalLM)" not in msg
    p.write_text(json.dumps({k: v for k, v in {**base, "model_type": "bert"}.items()
                             if k != "architectures"}))
    with pytest.raises(SpecError, match=r"model_type 'bert' names an unsupported "
                                        r"architecture; supported model types: "):
        load_config(p)


@pytest.mark.parametrize(("days", "shown"), [(27.5948, "27.59"), (0.0000579, "0.0000579"),
                                             (0.5, "0.500")])
def test_the_search_tables_days_keep_digits_under_a_day(days, shown):
    from opatlas.cli.estimate_run import days_cell

    assert days_cell(days) == shown
