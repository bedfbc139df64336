"""``opatlas collectives`` after a new user's review: the GPU's name for nccl results, a
failing size said by its cause with the sizes before it kept, a timeout and Ctrl-C that stop
every rank, sizes checked as the collective needs (and against memory), an ``invalid`` row
replaced, oversubscribed gloo ranks warned of, small bandwidths shown, repeated sizes once."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from types import SimpleNamespace

import psutil
import pytest

from conftest import cli_in_process, one_error
from opatlas.errors import OpatlasError
from opatlas.ops import collectives
from opatlas.store import Store


def _fake_collective(median_ns: float, calls: list | None = None):
    """``run_collective`` without torchrun: every size measured in ``median_ns``."""
    def run(op, sizes, nproc, *, backend, dtype, repeats, link_peak_gbps, **kwargs):
        if calls is not None:
            calls.append({"sizes": list(sizes), "nproc": nproc, "backend": backend, **kwargs})
        rows = [{"op": op, "elements": n, "bytes": 4 * n, "world_size": nproc, "dtype": dtype,
                 "backend": backend, "samples_ns": [median_ns] * repeats, "correct": True}
                for n in sizes]
        return collectives.summarize_samples(rows, link_peak_gbps)
    return run


def _stored(path, op="all_reduce"):
    with Store(path, read_only=True) as st:
        df = st.results(op=f"collective.{op}").sort_values("elements")
    return list(zip(df["elements"], df["device"], df["status"], df["median_ns"], strict=True))


# -- 1. nccl results are filed under the GPU's name ------------------------------------------

def test_nccl_results_are_filed_under_the_gpu_name(capsys, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i=0: SimpleNamespace(total_memory=80 * 10**9))
    calls: list = []
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(1e5, calls))
    store = tmp_path / "c.duckdb"
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--backend", "nccl",
                                  "--sizes", "4096", "--repeats", "2", "--store", str(store))
    assert code == 0, err
    assert calls[0]["backend"] == "nccl"
    # the name `opatlas run` files CUDA measurements under (CudaBackend.device_name)
    assert _stored(store) == [(4096, "NVIDIAH10080GBHBM3", "ok", 1e5)]


# -- 2. a failing size: its cause, the sizes before it kept; sizes checked against memory ----

def test_a_worker_failure_says_its_cause_and_keeps_the_sizes_before_it():
    """A real torchrun launch: the second size is not split evenly over the ranks (which
    plan_sizes would have rounded), so every rank's all_gather raises on it."""
    with pytest.raises(collectives.CollectiveFailed) as info:
        collectives.measure("all_gather", [512, 513], 2, backend="gloo", dtype="fp32",
                            repeats=2, warmup=1, link_peak_gbps=None, timeout_s=120)
    msg = str(info.value)
    assert "\n" not in msg and "ChildFailedError" not in msg, msg
    assert msg.startswith("torchrun all_gather on 2 ranks failed: rank "), msg
    assert "at 513 elements: RuntimeError: " in msg and "allgather" in msg, msg
    assert msg.endswith("(kept the sizes measured before: 512)"), msg
    partial = info.value.partial
    assert list(partial["elements"]) == [512] and list(partial["status"]) == ["ok"]
    assert len(partial.loc[0, "samples_ns"]) == 2


def test_the_sizes_measured_before_a_failure_are_printed_and_stored(capsys, tmp_path,
                                                                     monkeypatch):
    def fail(op, sizes, nproc, **kwargs):
        done = _fake_collective(2e5)(op, sizes[:1], nproc, **kwargs)
        raise collectives.CollectiveFailed("torchrun all_reduce on 2 ranks failed: rank 1 at "
                                           "2048 elements: RuntimeError: boom", done)

    monkeypatch.setattr(collectives, "run_collective", fail)
    store = tmp_path / "c.duckdb"
    code, out, err = cli_in_process(capsys, "collectives", "all_reduce", "--sizes", "1024,2048",
                                    "--repeats", "2", "--store", str(store))
    one_error(code, err, "rank 1 at 2048 elements: RuntimeError: boom")
    assert out.startswith("all_reduce") and "1024 el" in out and "2048 el" not in out, out
    assert [(r[0], r[2]) for r in _stored(store)] == [(1024, "ok")]


def test_a_size_beyond_memory_is_refused_before_launching(capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torchrun was launched for a size that cannot fit")

    monkeypatch.setattr(collectives, "measure", refuse)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=10**9))
    with pytest.raises(OpatlasError, match=r"^--sizes 200000000: all_reduce \(fp32\) needs "
                                           r"1.6 GB of buffers \(2 ranks × 800 MB\), more than "
                                           r"the 1 GB RAM available"):
        collectives.run_collective("all_reduce", [1024, 200_000_000], 2)
    collectives.check_memory("all_reduce", [100_000_000], 2, "fp32", "gloo")  # 800 MB fits
    monkeypatch.undo()
    monkeypatch.setattr(collectives, "measure", refuse)
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--sizes",
                                  "1024,1000000000000")
    one_error(code, err, "--sizes 1000000000000", "TB of buffers")


def test_buffer_bytes_count_every_buffer_a_rank_allocates():
    assert collectives.buffer_bytes("all_reduce", 1000, 4, "fp32") == 4000
    assert collectives.buffer_bytes("all_gather", 1000, 4, "bf16") == 2 * (2000 + 250)
    assert collectives.buffer_bytes("reduce_scatter", 1000, 4, "fp64") == 8 * 1250
    assert collectives.buffer_bytes("all_to_all", 1000, 4, "fp32") == 12000


# -- 3 and 6. a timeout and Ctrl-C stop every process torchrun started -----------------------

FAKE_TORCHRUN = textwrap.dedent('''
    import json, os, pathlib, signal, subprocess, sys, time
    folder, pid_file, then = sys.argv[1], sys.argv[2], sys.argv[3]
    row = {"op": "all_reduce", "elements": 1024, "bytes": 4096, "world_size": 2,
           "dtype": "fp32", "backend": "gloo", "samples_ns": [1000, 1000], "correct": True}
    pathlib.Path(folder, "samples.jsonl").write_text(json.dumps(row) + "\\n")
    # a rank, as torchrun starts it: in a session of its own, its folder on its command line
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--out",
                             folder], start_new_session=True)
    pathlib.Path(pid_file).write_text(str(rank.pid))
    if then == "interrupt":
        os.kill(os.getppid(), signal.SIGINT)
    time.sleep(60)
''')


@pytest.fixture
def fake_torchrun(tmp_path, monkeypatch):
    """torchrun replaced by a script that records one size, starts a rank, then (``then``)
    sleeps or interrupts its parent; returns the file the rank's pid is written to."""
    script, pid_file = tmp_path / "fake_torchrun.py", tmp_path / "rank.pid"
    script.write_text(FAKE_TORCHRUN)

    def use(then: str):
        monkeypatch.setattr(collectives, "_torchrun_cmd", lambda *a: [
            sys.executable, str(script), str(a[-1]), str(pid_file), then])
        return pid_file
    return use


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_a_timeout_stops_every_rank_and_keeps_what_was_measured(fake_torchrun):
    pid_file = fake_torchrun("sleep")
    t0 = time.monotonic()
    with pytest.raises(collectives.CollectiveFailed) as info:
        collectives.run_collective("all_reduce", [1024, 2048], 2, repeats=2, timeout_s=2)
    assert time.monotonic() - t0 < 30
    assert str(info.value) == ("torchrun all_reduce on 2 ranks timed out after 2 s (--timeout) "
                               "(kept the sizes measured before: 1024)")
    assert list(info.value.partial["elements"]) == [1024]
    assert _gone(int(pid_file.read_text())), "a rank outlived the timeout"


def test_ctrl_c_stops_every_rank_keeps_what_was_measured_and_exits_130(capsys, tmp_path,
                                                                       fake_torchrun):
    pid_file = fake_torchrun("interrupt")
    store = tmp_path / "c.duckdb"
    code, out, err = cli_in_process(capsys, "collectives", "all_reduce", "--sizes", "1024,2048",
                                    "--repeats", "2", "--store", str(store))
    assert code == 130, err
    assert err.splitlines() == ["opatlas: interrupted; every rank was stopped; the sizes "
                                "measured before (1024) are kept"], err
    assert "1024 el" in out and [r[0] for r in _stored(store)] == [1024]
    assert _gone(int(pid_file.read_text())), "a rank outlived Ctrl-C"


def test_timeout_is_an_option(capsys, monkeypatch):
    calls: list = []
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(1e5, calls))
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--sizes", "1024",
                                  "--timeout", "30")
    assert code == 0 and calls[0]["timeout_s"] == 30.0, err
    code, out, _ = cli_in_process(capsys, "collectives", "--help")
    assert code == 0 and "--timeout" in out and "SECONDS" in out


# -- 4 and 8. sizes: only what the collective needs, each once -------------------------------

def test_sizes_need_only_what_the_collective_needs():
    plan = collectives.plan_sizes
    assert plan("all_reduce", [1048576, 1000], 3) == ([1048576, 1000], [])
    assert plan("send_recv", [7], 2) == ([7], [])
    assert plan("all_gather", [1000], 3) == (
        [999], ["--sizes 1000: all_gather on 3 ranks measures 999 elements (333 per rank)"])
    assert plan("all_reduce", [1024, 1024], 2) == (
        [1024], ["--sizes 1024: 1024 elements are on the list already; measured once"])
    assert plan("reduce_scatter", [1000, 999], 3)[0] == [999]
    for bad, why in ((0, "> 0"), (-1024, "> 0")):
        with pytest.raises(OpatlasError, match=f"^--sizes {bad}: .*{why}"):
            plan("all_reduce", [1024, bad], 2)
    with pytest.raises(OpatlasError, match=r"^--sizes 2: all_to_all splits the buffer over the "
                                           r"3 ranks \(--nproc\) and needs at least one"):
        plan("all_to_all", [2], 3)


def test_cli_measures_default_sizes_on_3_ranks_and_repeated_sizes_once(capsys, monkeypatch):
    calls: list = []
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(1e5, calls))
    monkeypatch.setattr("opatlas.cli.collectives_cmd._usable_cores", lambda: 16)
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--nproc", "3")
    assert code == 0 and err == "" and calls[-1]["sizes"] == [1048576], err
    code, out, err = cli_in_process(capsys, "collectives", "all_reduce", "--sizes", "1024,1024")
    assert code == 0 and calls[-1]["sizes"] == [1024] and out.count("1024 el") == 1
    assert err == "opatlas: --sizes 1024: 1024 elements are on the list already; measured once\n"
    for bad in ("0", "-1024"):
        one_error(*cli_in_process(capsys, "collectives", "all_reduce", f"--sizes={bad}")[::2],
                  f"--sizes {bad}:")


# -- 5. an invalid row is replaced -----------------------------------------------------------

def test_an_invalid_row_is_replaced_by_a_later_run(capsys, tmp_path, monkeypatch):
    store = tmp_path / "c.duckdb"
    args = ("collectives", "all_reduce", "--sizes", "4096", "--repeats", "2", "--store",
            str(store))
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(400_000))
    code, out, _ = cli_in_process(capsys, *args, "--link-peak-gbps", "0.001")  # a mistake
    assert code == 0 and "invalid" in out
    assert [r[2] for r in _stored(store)] == ["invalid"]
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(300_000))
    code, _, err = cli_in_process(capsys, *args)
    assert code == 0 and err == "", err
    assert [(r[2], r[3]) for r in _stored(store)] == [("ok", 300_000.0)]


# -- 7. oversubscribed gloo ranks; small bandwidths ------------------------------------------

def test_more_gloo_ranks_than_cores_are_warned_of(capsys, monkeypatch):
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(1e6))
    monkeypatch.setattr("opatlas.cli.collectives_cmd._usable_cores", lambda: 2)
    code, out, err = cli_in_process(capsys, "collectives", "all_reduce", "--nproc", "8",
                                    "--sizes", "1024", "--repeats", "2")
    assert code == 0
    assert err.startswith("opatlas: warning: --nproc 8 gloo ranks on 2 CPU cores"), err
    # 4096 B in 1 ms: 0.004096 GB/s, shown to 3 figures; busbw × 2·7/8
    assert "algbw 0.0041 GB/s  busbw 0.00717 GB/s  ok" in out, out
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--nproc", "2",
                                  "--sizes", "1024", "--repeats", "2")
    assert code == 0 and err == ""


def test_json_rows_are_unchanged(capsys, monkeypatch):
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(1e6))
    code, out, _ = cli_in_process(capsys, "collectives", "all_reduce", "--sizes", "1024",
                                  "--repeats", "2", "--json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["elements"] == 1024 and row["algbw_GBps"] == pytest.approx(0.004096)
