"""The Ray executor on a simulated multi-node cluster (``ray.cluster_utils.Cluster``): a head with
no CPUs, two nodes with two fake GPUs and two fake Tenstorrent cards each; every vector once,
one device per worker, failures recorded (a vector that kills its worker too), node loss,
driver loss, same rows as the local run; a private Ray beside a running cluster, a short sweep
spread over every worker, Ctrl-C without waiting, a resume with nothing to run that says
nothing.

The cluster is small (80 MB object store per node, one CPU per node, no dashboard) and shared by
the whole module (each start costs seconds of the suite); the heavy lifting is one GPU sweep that
several tests read."""

from __future__ import annotations

import _thread
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, write_spec
from opatlas.run import RunConfig, run_spec
from opatlas.run.ray_executor import RayConfig, RayDispatcher, connect, run_spec_ray
from opatlas.run.runner import prepare_run
from opatlas.spec import spec_from_mapping
from opatlas.store import Store

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

OBJECT_STORE = 80 * 2**20
N_GPU_SWEEP = 240
CRASH_AT, HANG_AT = 7, 11
TIMEOUT_S = 1.5  # the hang costs this long, on the Ray path and on the local one
QUIET = dict(interactive=False, log_every=10**6)


def node_args(**resources) -> dict:
    return dict(num_cpus=1, object_store_memory=OBJECT_STORE, **resources)


@pytest.fixture(scope="module")
def cluster():
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
                           "PYTHONUNBUFFERED": "1"}.items():
            mp.setenv(key, value)
        c = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=0, object_store_memory=OBJECT_STORE, include_dashboard=False))
        try:
            for _ in range(2):
                c.add_node(**node_args(num_gpus=2, resources={"TTNPU": 2}))
            c.wait_for_nodes()
            ray.init(address=c.address)
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


def fault_spec(n: int, **fixed) -> dict:
    return {"name": "faults", "op": "fault", "params": {"i": list(range(n))}, "fixed": fixed,
            "repeats": 2, "warmup": 0}


@pytest.fixture(scope="module")
def gpu_sweep(cluster, tmp_path_factory):
    """One CPU-backend sweep on workers that each hold one fake GPU; a crash and a hang in it."""
    spec = spec_from_mapping(fault_spec(N_GPU_SWEEP, crash_at=CRASH_AT, hang_at=HANG_AT))
    path = tmp_path_factory.mktemp("gpu") / "ray.duckdb"
    cfg = RunConfig(timeout_s=TIMEOUT_S, **QUIET)
    with Store(path) as st:
        summary = run_spec_ray(spec, st, cfg, RayConfig(resource="GPU", chunk=16))
        df = st.results()
    return spec, summary, df


def test_every_vector_recorded_exactly_once(gpu_sweep):
    _, summary, df = gpu_sweep
    assert summary.ran == N_GPU_SWEEP and summary.skipped == 0
    assert len(df) == N_GPU_SWEEP and df["vector_id"].nunique() == N_GPU_SWEEP
    assert sorted(df["i"]) == list(range(N_GPU_SWEEP))
    assert summary.duplicate_rows == 0
    assert sum(n.vectors for n in summary.nodes.values()) == N_GPU_SWEEP
    ok = df[df["status"] == "ok"]
    assert (ok["repeats"] == 2).all() and (ok["min_ns"] > 0).all()


def test_each_worker_saw_exactly_one_gpu(gpu_sweep, cluster):
    _, summary, _ = gpu_sweep
    worker_nodes = {n.node_id[:8] for n in cluster.worker_nodes}
    assert {name.split("/")[1] for name in summary.nodes} <= worker_nodes  # never the head
    for node in summary.nodes.values():
        assert node.devices, "a worker ran without a device"
        # one id per worker, as Ray sets it for num_gpus=1; ids of a 2-GPU node are 0 or 1
        assert all(re.fullmatch(r"CUDA_VISIBLE_DEVICES=[01]", d) for d in node.devices), \
            node.devices


def test_crash_and_hang_are_recorded_on_the_ray_path(gpu_sweep):
    _, summary, df = gpu_sweep
    by_i = df.set_index("i")
    assert by_i.loc[CRASH_AT, "status"] == "crash"
    assert "exit code 3" in by_i.loc[CRASH_AT, "message"]
    assert by_i.loc[HANG_AT, "status"] == "timeout"
    assert f"{TIMEOUT_S:g} s" in by_i.loc[HANG_AT, "message"]
    assert summary.statuses == {"ok": N_GPU_SWEEP - 2, "crash": 1, "timeout": 1}
    assert sum(n.failures for n in summary.nodes.values()) == 2


def test_ray_and_local_runs_have_the_same_rows(gpu_sweep, tmp_path):
    spec, _, ray_df = gpu_sweep
    with Store(tmp_path / "local.duckdb") as st:
        run_spec(spec, st, RunConfig(timeout_s=TIMEOUT_S, **QUIET))
        local_df = st.results()
    cols = ["vector_id", "pass", "status", "backend", "device", "dtype", "repeats"]

    def key(df):
        return sorted(map(tuple, df[cols].astype(str).to_numpy()))

    assert key(ray_df) == key(local_df)


PROBE_OP = '''
import os
import signal

from opatlas.ops.base import Op
from opatlas.ops.registry import register_op


@register_op
class DeviceProbe(Op):
    """Fails on purpose with what the guarded process sees, so the store records it; at
    i == KILL_AT it kills the Ray worker (the guarded process's parent) instead."""
    name = "device_probe"
    params = ("i",)
    passes = ("fwd",)

    def build(self, p, device):
        if p["i"] == KILL_AT:
            os.kill(os.getppid(), signal.SIGKILL)
        return dict(p)

    def prepare(self, state, pass_):
        return None

    def execute(self, state, pass_, prepared):
        seen = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "TT_VISIBLE_DEVICES")}
        raise RuntimeError(f"pid={os.getpid()} saw {seen}")
'''
KILL_AT, N_PROBE = 4, 24


def test_tt_cards_one_per_worker_and_a_vector_that_kills_its_worker(cluster, tmp_path):
    """Through the CLI, a separate driver: a user's op file travels in the job's runtime env;
    the guarded process that runs each vector sees exactly one Tenstorrent card
    (TT_VISIBLE_DEVICES as Ray sets it) and no GPU. The vector that kills its worker, each time
    it is tried, is the only one recorded as a crash: the others of its chunk run again."""
    ops_file = tmp_path / "probe_ops_tt.py"
    ops_file.write_text(f"KILL_AT = {KILL_AT}\n" + PROBE_OP)
    spec = write_spec(tmp_path / "probe.yml", {"op": "device_probe",
                                               "params": {"i": list(range(N_PROBE))},
                                               "repeats": 1, "warmup": 0})
    store = tmp_path / "tt.duckdb"
    out = run_cli("run", str(spec), "--store", str(store), "--ops-module", str(ops_file),
                  "--executor", "ray", "--address", cluster.address, "--ray-resource", "TTNPU",
                  "--chunk", "4", check=True).stdout
    with Store(store) as st:
        df = st.results()
    assert len(df) == N_PROBE and df["vector_id"].nunique() == N_PROBE
    status = dict(zip(df["i"], df["status"], strict=True))
    assert status == {i: "crash" if i == KILL_AT else "error" for i in range(N_PROBE)}
    assert "died 3 times" in df.loc[df["i"] == KILL_AT, "message"].iloc[0]
    seen = df.loc[df["i"] != KILL_AT, "message"].str.extract(r"saw (\{.*\})")[0]
    assert seen.str.fullmatch(
        r"\{'CUDA_VISIBLE_DEVICES': None, 'TT_VISIBLE_DEVICES': '[01]'\}").all(), seen.unique()
    node_rows = [line for line in out.splitlines() if "TT_VISIBLE_DEVICES=" in line]
    assert node_rows and sum(int(line.split()[1]) for line in node_rows) == N_PROBE - 1
    assert not any("CUDA_VISIBLE_DEVICES" in line for line in node_rows)


@pytest.mark.parametrize(("chunk", "sleep_ms", "after"), [(8, 20, 1), (1, 2, 12)])
def test_a_removed_node_loses_nothing_and_records_nothing_twice(cluster, tmp_path, chunk,
                                                                 sleep_ms, after):
    """Two nodes with one fake card each; the first to return ``after`` chunks is removed while
    its worker has more in flight; those chunks run again on the other node. With one fast
    vector per chunk, the calls lost carry several chunks each (calls are sized to run about
    ``call_s``), and each of those chunks runs again."""
    nodes = [cluster.add_node(**node_args(resources={"FAKEDEV": 1})) for _ in range(2)]
    cluster.wait_for_nodes()
    n = 120
    spec = spec_from_mapping(fault_spec(n, sleep_ms=sleep_ms))
    cfg = RunConfig(interactive=False, log_every=10**6)
    removed: list[str] = []
    reported: Counter[str] = Counter()

    def remove_first_reporting_node(result) -> None:
        reported[result.node] += 1
        if removed or reported[result.node] < after:
            return
        for node in nodes:
            if result.node.endswith(node.node_id[:8]):
                removed.append(node.node_id[:8])
                cluster.remove_node(node)

    try:
        with Store(tmp_path / "rm.duckdb") as st:
            plan = prepare_run(spec, st, cfg)
            rcfg = RayConfig(resource="FAKEDEV", chunk=chunk, start_timeout_s=120)
            dispatcher = RayDispatcher(ray, st, plan, cfg, rcfg,
                                       on_result=remove_first_reporting_node)
            summary = dispatcher.run()
            df = st.results()
    finally:
        for node in nodes:
            if node.node_id[:8] not in removed:
                cluster.remove_node(node)
    assert removed, "no node was removed"
    assert summary.retried_chunks >= 1  # the removed node had chunks in flight
    assert len(df) == n and df["vector_id"].nunique() == n and (df["status"] == "ok").all()
    assert summary.duplicate_rows == 0
    survivor = next(nd.node_id[:8] for nd in nodes if nd.node_id[:8] not in removed)
    assert any(name.endswith(survivor) for name in summary.nodes)
    per_call = next(iter(dispatcher.queues.values())).pace.chunks_per_call(rcfg.call_s, 1024)
    assert (per_call > 1) == (chunk == 1)  # fast chunks share calls, slow ones go alone


def test_killed_driver_resumes_from_the_store(cluster, tmp_path):
    """SIGKILL to the driver mid-sweep, then the same command: every vector once. The vectors
    are slow only while a gate file exists (4 workers x 200 ms per vector: >= 10 s of work),
    so the resume, with the gate gone, runs the rest at once: same spec, same vector ids."""
    n = 200
    gate = tmp_path / "slow.gate"
    gate.touch()
    spec = write_spec(tmp_path / "slow.yml",
                      fault_spec(n, sleep_ms=100, sleep_while=str(gate)))
    store = tmp_path / "s.duckdb"
    args = ["run", str(spec), "--store", str(store), "--executor", "ray", "--address",
            cluster.address, "--ray-resource", "GPU", "--chunk", "4", "--log-every", "8"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.Popen([sys.executable, "-m", "opatlas", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    done = 0
    while done < 24 and time.monotonic() < deadline:
        m = re.search(r"\| (\d+)/\d+=", proc.stderr.readline())
        done = int(m.group(1)) if m else done
    time.sleep(2.5)  # past one time-based flush (every 2 s)
    assert proc.poll() is None, "the sweep ended before the driver could be killed"
    proc.send_signal(signal.SIGKILL)  # the driver, mid-sweep, no clean-up
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with Store(store) as st:
        recorded_before = st.count()
    assert 0 < recorded_before < n
    gate.unlink()
    out = run_cli(*args, check=True, timeout=300).stdout
    assert f"{recorded_before} already in the store" in out
    with Store(store) as st:
        df = st.results()
    assert len(df) == n and df["vector_id"].nunique() == n
    assert sorted(df["i"]) == list(range(n)) and (df["status"] == "ok").all()


def test_without_ray_the_cli_says_how_to_install_it_and_exits_2(tmp_path, monkeypatch, capsys):
    from opatlas.cli import main

    spec = write_spec(tmp_path / "s.yml", fault_spec(3))
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(spec), "--store", str(tmp_path / "s.duckdb"), "--executor", "ray"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "pip install 'opatlas[ray]'" in err
    with Store(tmp_path / "s.duckdb") as st:
        assert st.count() == 0  # nothing half-done


def test_chunk_plan_and_resources_by_backend():
    from opatlas.run.ray_executor import actor_resources, device_resource, shipped_ops_modules

    assert device_resource("cuda") == "GPU" and device_resource("ttnn") == "TTNPU"
    assert device_resource("cpu") == "CPU" and device_resource("wormhole-sim") == "CPU"
    assert device_resource("cuda", "FAKEDEV") == "FAKEDEV"
    assert actor_resources("GPU", 2) == {"num_cpus": 0, "num_gpus": 2}
    assert actor_resources("TTNPU", 1) == {"num_cpus": 0, "resources": {"TTNPU": 1}}
    assert actor_resources("CPU", 3) == {"num_cpus": 3}
    here = Path(__file__)
    assert shipped_ops_modules([str(here), "my_pkg.ops"]) == (
        [str(here.resolve())], [here.stem, "my_pkg.ops"])


def test_an_address_nobody_answers_is_one_clear_error():
    from opatlas.errors import OpatlasError
    from opatlas.run.ray_executor import check_reachable

    with pytest.raises(OpatlasError, match=r"--address 127\.0\.0\.1:1: nothing answers there"):
        check_reachable("127.0.0.1:1")
    check_reachable("auto")  # left to Ray


def test_chunks_are_taken_lazily_and_retried_ones_go_first():
    """A device type's queue reads the expansion chunk by chunk (one ahead), not all at once."""
    from opatlas.run.plan import Work
    from opatlas.run.ray_executor import _Chunk, _ChunkQueue
    from opatlas.sweep import Vector

    read: list[int] = []

    def batches():
        for b in range(3):
            read.append(b)
            yield [Vector.make("noop", {"i": 10 * b + k}, 10 * b + k) for k in range(10)]

    queue = _ChunkQueue("dev", Work(total=30, todo=30, batches=batches()), size=4)
    assert read == [0]  # one chunk read ahead: the first batch only
    first = queue.pop()
    assert [v.index for v in first.vectors] == [0, 1, 2, 3] and read == [0]
    queue.again.appendleft(_Chunk("dev", first.vectors, attempts=1))
    queue.again.append(_Chunk("dev", first.vectors, attempts=1))
    assert [c.attempts for c in queue.take(5)] == [1]  # run again: first, and alone
    assert [c.attempts for c in queue.take(5)] == [1]
    sizes = [len(c.vectors) for c in queue.take(2)]  # then new ones, as many as asked
    while queue:
        sizes.append(len(queue.pop().vectors))
    assert sizes == [4, 4, 4, 4, 4, 4, 2] and read == [0, 1, 2]  # chunks span the batches
    with pytest.raises(IndexError):
        queue.pop()


def test_a_call_carries_the_chunks_that_run_about_call_s():
    """Calls are sized by what chunks of the device type took so far: one until a result
    says, then enough to run ``call_s``, never more than the cap, never less than one."""
    from opatlas.run.ray_executor import _Pace

    pace = _Pace()
    assert pace.chunks_per_call(0.05, 1024) == 1  # nothing measured yet
    pace.update(busy_s=0.004, chunks=4)  # 1 ms a chunk
    assert pace.chunk_s == pytest.approx(0.001)
    assert pace.chunks_per_call(0.05, 1024) == 50 and pace.chunks_per_call(0.05, 16) == 16
    pace.update(busy_s=2.0, chunks=1)  # a slow one: 0.8 * 1 ms + 0.2 * 2 s
    assert pace.chunk_s == pytest.approx(0.4008)
    assert pace.chunks_per_call(0.05, 1024) == 1
    pace = _Pace()
    pace.update(busy_s=0.0, chunks=3)  # a backend that reports no time: capped, no division
    assert pace.chunks_per_call(0.05, 64) == 64


class FakeRay:
    """Records what ``ray.init`` was called with."""

    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_without_address_ray_is_started_here_even_with_ray_address_set(monkeypatch, capsys):
    """Ray joins RAY_ADDRESS (or a cluster already running here) when no address is given,
    and then refuses object_store_memory with a ValueError: opatlas asks for a new one."""
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    fake = FakeRay()
    assert connect(fake, RayConfig(object_store_mb=100)) is True
    assert fake.kwargs["address"] == "local"
    assert fake.kwargs["object_store_memory"] == 100 * 2**20
    err = capsys.readouterr().err
    assert "RAY_ADDRESS=10.0.0.1:6379 is ignored without --address" in err


def test_cli_without_address_beside_a_running_cluster(cluster, tmp_path):
    """The real case: a cluster runs on this machine and RAY_ADDRESS names it."""
    spec = write_spec(tmp_path / "s.yml", fault_spec(3))
    store = tmp_path / "s.duckdb"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", cluster.address)
        proc = run_cli("run", str(spec), "--store", str(store), "--executor", "ray")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert f"RAY_ADDRESS={cluster.address} is ignored" in proc.stderr
    with Store(store) as st:
        assert st.count() == 3


def dispatcher(store: Store, spec: dict, rcfg: RayConfig, on_result=None) -> RayDispatcher:
    cfg = RunConfig(**QUIET)
    plan = prepare_run(spec_from_mapping(spec), store, cfg)
    return RayDispatcher(ray, store, plan, cfg, rcfg, on_result=on_result)


def test_a_short_sweep_is_spread_over_every_worker(cluster, tmp_path):
    """Two slow vectors, two workers: one each (the first worker up took both, two calls)."""
    workers: set[tuple[str, str]] = set()

    def seen(result) -> None:
        workers.add((result.node, str(sorted(result.visible.items()))))

    with Store(tmp_path / "sp.duckdb") as st:
        d = dispatcher(st, fault_spec(2, sleep_ms=2000),
                       RayConfig(resource="GPU", max_workers=2), on_result=seen)
        summary = d.run()
    assert summary.statuses == {"ok": 2}
    assert len(workers) == 2, workers


def test_ctrl_c_kills_busy_workers_without_waiting(cluster, tmp_path):
    """Ctrl-C while every worker runs a 10 s vector: the driver is out in about a second, not
    after waiting for close() queued behind those calls (up to 10 s)."""
    interrupted: list[float] = []
    with Store(tmp_path / "int.duckdb") as st:
        d = dispatcher(st, fault_spec(4, sleep_ms=5000),
                       RayConfig(resource="GPU", max_workers=2, chunk=1))
        submit = d.submit

        def submit_then_interrupt() -> None:
            submit()
            if d.calls and not interrupted:
                interrupted.append(time.monotonic() + 1.0)
                threading.Timer(1.0, _thread.interrupt_main).start()

        d.submit = submit_then_interrupt  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            d.run()
        elapsed = time.monotonic() - interrupted[0]
        assert st.count() == 0  # nothing had finished
    assert elapsed < 4.0, f"Ctrl-C took {elapsed:.1f} s"
    assert not d.slots and not d.starting


def test_a_resume_with_nothing_to_run_says_nothing_about_workers_starting(cluster, tmp_path,
                                                                          capsys):
    """The first worker up finds nothing to run; the other one, still starting, is waited for
    (it could hold another device type) instead of a note asking to run the command again."""
    spec = spec_from_mapping(fault_spec(4))
    rcfg = RayConfig(resource="GPU", max_workers=2)
    with Store(tmp_path / "r.duckdb") as st:
        first = run_spec_ray(spec, st, RunConfig(**QUIET), rcfg)
        capsys.readouterr()
        again = run_spec_ray(spec, st, RunConfig(**QUIET), rcfg)
    assert first.ran == 4 and again.ran == 0 and again.skipped == 4
    assert "still starting" not in capsys.readouterr().err
