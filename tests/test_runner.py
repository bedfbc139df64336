"""The runner: statistics, guards against hangs/crashes/errors, resume, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import run_cli, write_spec
from opatlas.run import RunConfig, run_spec, summarize
from opatlas.spec import load_spec, spec_from_mapping
from opatlas.store import Store


def test_summarize():
    s = summarize([1, 2, 3, 4, 10])  # deviations -3 -2 -1 0 6: population variance 50/5
    assert s == {"mean_ns": 4.0, "std_ns": pytest_approx(10 ** 0.5), "median_ns": 3.0,
                 "min_ns": 1.0, "max_ns": 10.0}


def pytest_approx(v):
    import pytest

    return pytest.approx(v, rel=1e-4)


def test_every_failure_kind_is_recorded_and_the_sweep_goes_on(tmp_path):
    spec = spec_from_mapping({
        "name": "faults", "op": "fault", "params": {"i": list(range(9))},
        "fixed": {"raise_at": 1, "crash_at": 3, "hang_at": 5, "segfault_at": 6, "oom_at": 7,
                  "invalid_at": 8},
        "repeats": 3, "warmup": 1})
    with Store(tmp_path / "s.duckdb") as st:
        summary = run_spec(spec, st, RunConfig(timeout_s=3.0, interactive=False))
        df = st.results().sort_values("i")
    assert summary.ran == 9
    assert list(df["status"]) == ["ok", "error", "ok", "crash", "ok", "timeout", "crash",
                                  "oom", "invalid"]
    msgs = dict(zip(df["i"], df["message"], strict=True))
    assert "deliberate failure" in msgs[1]
    assert "exit code 3" in msgs[3]
    assert "SIGSEGV" in msgs[6]
    assert "3 s" in msgs[5]
    ok = df[df["status"] == "ok"]
    assert (ok["repeats"] == 3).all() and ok["median_ns"].notna().all()
    assert df[df["status"] != "ok"]["median_ns"].isna().all()


def test_rerun_resumes_and_retry_failed_reruns_failures(tmp_path):
    spec = spec_from_mapping({"op": "fault", "params": {"i": list(range(6))},
                              "fixed": {"raise_at": 2}, "repeats": 1, "warmup": 0})
    with Store(tmp_path / "s.duckdb") as st:
        first = run_spec(spec, st, RunConfig(interactive=False))
        second = run_spec(spec, st, RunConfig(interactive=False))
        third = run_spec(spec, st, RunConfig(interactive=False, retry_failed=True))
        assert st.count() == 6
    assert (first.ran, second.ran, second.skipped, third.ran) == (6, 0, 6, 1)


def test_real_cpu_op_records_flops_and_bytes(tmp_path):
    spec = spec_from_mapping({"op": "linear", "params": {"b": [2], "l": [16], "dim": [32]},
                              "repeats": 3, "warmup": 1})
    with Store(tmp_path / "s.duckdb") as st:
        run_spec(spec, st, RunConfig(interactive=False))
        df = st.results().set_index("pass")
    t, i, o = 32, 32, 96  # tokens, in, out (qkv role, mp=1)
    assert df.loc["fwd", "flops"] == 2 * t * i * o
    assert df.loc["bwd", "flops"] == 4 * t * i * o
    assert df.loc["fwd", "min_bytes"] == 4 * (t * i + i * o + t * o)
    assert (df["status"] == "ok").all() and (df["min_ns"] > 0).all()
    assert (df["min_ns"] <= df["median_ns"]).all() and (df["median_ns"] <= df["max_ns"]).all()


def test_kill_minus_9_then_resume_records_every_vector_exactly_once(tmp_path):
    n = 150
    spec = write_spec(tmp_path / "slow.yml", {
        "op": "fault", "params": {"i": list(range(n))}, "fixed": {"sleep_ms": 25},
        "repeats": 1, "warmup": 0})
    store = tmp_path / "s.duckdb"
    cmd = [sys.executable, "-m", "opatlas", "run", str(spec), "--store", str(store),
           "--log-every", "10"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    lines = 0
    while lines < 5 and time.monotonic() < deadline:  # >= 50 done; a flush every 2 s
        line = proc.stderr.readline()
        lines += "vec/s" in line
    time.sleep(2.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the runner and its worker, no clean-up
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with Store(store) as st:
        recorded_before = st.count()
    assert 0 < recorded_before < n
    out = run_cli("run", str(spec), "--store", str(store), check=True).stdout
    assert f"{recorded_before} already in the store" in out
    with Store(store) as st:
        df = st.results()
    assert len(df) == n and df["vector_id"].nunique() == n
    assert sorted(df["i"]) == list(range(n))
    assert (df["status"] == "ok").all()


def test_ett_config_runs_on_cpu_with_where(tmp_path, data_dir):
    spec = load_spec(data_dir / "ett_linear1.yml")
    with Store(tmp_path / "s.duckdb") as st:
        s = run_spec(spec, st, RunConfig(repeats=1, warmup=0, interactive=False), where=(
            "mp == 16 and b == 2 and l == 1024 and dim == 2048"))
        df = st.results()
    assert s.ran == 1 and set(df["pass"]) == {"fwd", "bwd"}
    assert (df["status"] == "ok").all() and (df["dtype"] == "fp16").all()
    assert "role" not in df.columns  # the alias fixes it: in the op name, not the params
    assert df.loc[df["pass"] == "fwd", "flops"].item() == 2 * 2048 * 2048 * (3 * 2048 // 16)
