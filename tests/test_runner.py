"""The runner: statistics, guards against hangs/crashes/errors, resume, kill -9."""

from __future__ import annotations

import json
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
        summary = run_spec(spec, st, RunConfig(timeout_s=1.5, interactive=False))
        df = st.results().sort_values("i")
    assert summary.ran == 9
    assert list(df["status"]) == ["ok", "error", "ok", "crash", "ok", "timeout", "crash",
                                  "oom", "invalid"]
    msgs = dict(zip(df["i"], df["message"], strict=True))
    assert "deliberate failure" in msgs[1]
    assert "exit code 3" in msgs[3]
    assert "SIGSEGV" in msgs[6]
    assert "1.5 s" in msgs[5]
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


PROBE_THREADS = '''
from opatlas.ops.base import Op
from opatlas.ops.registry import register_op


@register_op
class ThreadProbe(Op):
    """Fails on purpose with the measuring process's PyTorch thread count."""
    name = "thread_probe"
    params = ("i",)

    def build(self, p, device):
        return None

    def forward(self, state):
        import torch

        raise RuntimeError(f"threads={torch.get_num_threads()}")
'''


def test_cpu_threads_option_pins_the_measuring_process_and_is_recorded(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text(PROBE_THREADS)
    from opatlas.ops import load_ops_module

    load_ops_module(str(module))
    spec = spec_from_mapping({"op": "thread_probe", "params": {"i": [0]}, "repeats": 1,
                              "warmup": 0})
    cfg = RunConfig(interactive=False, ops_modules=[str(module)],
                    backend_options={"threads": "1"})
    with Store(tmp_path / "s.duckdb") as st:
        run_spec(spec, st, cfg)
        row = st.results().iloc[0]
    assert row["status"] == "error" and "threads=1" in row["message"]
    assert json.loads(row["versions_json"])["threads"] == "1"
    bad = write_spec(tmp_path / "s.yml", {"op": "noop", "params": {"i": [0]}})
    proc = run_cli("run", str(bad), "--backend-opt", "threads=0", "--store",
                   str(tmp_path / "t.duckdb"))
    assert proc.returncode == 2 and "threads must be >= 1, got 0" in proc.stderr


def test_kill_minus_9_then_resume_records_every_vector_exactly_once(tmp_path):
    """The vectors are slow (25 ms) only while the gate file exists: the resume, with the same
    spec and vector ids, runs the rest at once."""
    n = 150
    gate = tmp_path / "slow.gate"
    gate.touch()
    spec = write_spec(tmp_path / "slow.yml", {
        "op": "fault", "params": {"i": list(range(n))},
        "fixed": {"sleep_ms": 25, "sleep_while": str(gate)}, "repeats": 1, "warmup": 0})
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
    gate.unlink()
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


BATCHED = {"name": "batched", "op": "noop", "params": {"i": list(range(50)), "j": [0, 1]},
           "constraints": ["i % 5 != 0"], "repeats": 1, "warmup": 0}


def test_a_sweep_is_recorded_and_resumed_batch_by_batch_each_vector_once(tmp_path):
    """Small batches (7 grid points): every vector is in the store's ``vectors`` table once,
    the resumed run skips exactly the vectors done before, and every result is recorded once."""
    from opatlas.run import Runner
    from opatlas.run.plan import record_sweep
    from opatlas.sweep import expand

    spec = spec_from_mapping(BATCHED)
    with Store(tmp_path / "s.duckdb") as st:
        runner = Runner(st, RunConfig(interactive=False))
        first = runner.run(record_sweep(spec, st, where="j == 0", batch_size=7))
        done_before = set(st.results()["vector_id"])
        plan = record_sweep(spec, st, batch_size=7)
        work = plan.work(st, "cpu", runner.device)
        assert (plan.valid, work.todo, work.skipped) == (80, 40, 40)
        second = runner.run(plan)
        vectors, results = st.table("vectors"), st.results()
    assert (first.ran, second.total, second.skipped, second.ran) == (40, 80, 40, 40)
    expected = expand(spec, keep_invalid=True)
    assert sorted(vectors["vector_id"]) == sorted(
        [v.id for v in expected.vectors] + [v.id for v, _ in expected.invalid_vectors])
    assert vectors["vector_id"].is_unique and (~vectors["valid"]).sum() == 20
    assert set(vectors.loc[~vectors["valid"], "reason"]) == {"violates: i % 5 != 0"}
    assert not results.duplicated(["vector_id", "pass"]).any()
    assert results["vector_id"].nunique() == 80 and len(results) == 80 * 2  # fwd and bwd
    ran_second = set(results["vector_id"]) - done_before
    assert ran_second == {v.id for v in expected.vectors if v.params["j"] == 1}


def test_work_comes_in_chunks_across_batches_less_the_done_vectors(tmp_path):
    from opatlas.run.plan import record_sweep
    from opatlas.sweep import expand

    spec = spec_from_mapping(BATCHED)
    with Store(tmp_path / "s.duckdb") as st:
        plan = record_sweep(spec, st, parts=3, part=2, batch_size=7)
        valid = expand(spec, parts=3, part=2).vectors
        assert all(v.index % 3 == 1 for v in valid) and plan.valid == len(valid)
        st.add_results([_result(v, "cpu", "dev") for v in valid[::4]])
        st.add_results([_result(v, "cpu", "other") for v in valid])  # another device
        work = plan.work(st, "cpu", "dev")
        chunks = list(work.chunks(5))
    left = [v for k, v in enumerate(valid) if k % 4]
    assert work.todo == len(left) and work.skipped == len(valid) - len(left)
    assert [v.id for c in chunks for v in c] == [v.id for v in left]
    assert [len(c) for c in chunks[:-1]] == [5] * (len(chunks) - 1) and 0 < len(chunks[-1]) <= 5


def test_recording_a_sweep_does_not_hold_it_in_memory(tmp_path):
    """40,000 vectors recorded in batches of 4,000: Python's peak stays at a few MB (the list
    of vectors alone would be ~17 MB); the plan keeps 16 bytes per vector."""
    import tracemalloc

    from opatlas.run.plan import record_sweep

    spec = spec_from_mapping({"name": "big", "op": "noop", "params": {"i": list(range(40_000))}})
    with Store(tmp_path / "s.duckdb") as st:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            plan = record_sweep(spec, st, batch_size=4000)
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        assert plan.valid == st.count("vectors") == 40_000
    assert plan.keys.nbytes == 16 * 40_000
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MB"


def _result(vec, backend, device):
    from opatlas.store import ResultRow
    from opatlas.sweep import params_json

    return ResultRow(vector_id=vec.id, op=vec.op, params_json=params_json(vec.params),
                     pass_="fwd", backend=backend, device=device, dtype="fp32", status="ok")
