"""Review round 3 of ``--executor ray``: a private Ray beside a running cluster, a vector that
kills its worker, a short sweep spread over every worker, Ctrl-C without waiting, and a resume
with nothing to run that says nothing.

One small simulated cluster for the module (a head with no CPUs, two nodes with two fake GPUs
each, 80 MB object store per node), as in ``test_ray_executor.py``."""

from __future__ import annotations

import _thread
import threading
import time
from typing import Any

import pytest

from conftest import run_cli, write_spec
from opatlas.run import RunConfig
from opatlas.run.ray_executor import RayConfig, RayDispatcher, connect, run_spec_ray
from opatlas.run.runner import prepare_run
from opatlas.spec import spec_from_mapping
from opatlas.store import Store

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

OBJECT_STORE = 80 * 2**20
QUIET = dict(interactive=False, log_every=10**6)


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
                c.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, num_gpus=2)
            c.wait_for_nodes()
            ray.init(address=c.address)
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


def fault_spec(n: int, **fixed: Any) -> dict:
    return {"name": "faults", "op": "fault", "params": {"i": list(range(n))}, "fixed": fixed,
            "repeats": 2, "warmup": 0}


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


KILLER_OP = '''
import os
import signal

from opatlas.ops.base import Op
from opatlas.ops.registry import register_op


@register_op
class KillerR3(Op):
    """Kills the Ray worker (the parent of the guarded process) at i == 4."""
    name = "killer_r3"
    params = ("i",)
    passes = ("fwd",)

    def build(self, p, device):
        if p["i"] == 4:
            os.kill(os.getppid(), signal.SIGKILL)
        return dict(p)

    def prepare(self, state, pass_):
        return None

    def execute(self, state, pass_, prepared):
        return None
'''


def test_only_the_vector_that_kills_its_worker_is_recorded_as_crash(cluster, tmp_path):
    ops_file = tmp_path / "killer_r3_ops.py"
    ops_file.write_text(KILLER_OP)
    spec = write_spec(tmp_path / "k.yml", {"op": "killer_r3", "params": {"i": list(range(10))},
                                           "repeats": 1, "warmup": 0})
    store = tmp_path / "k.duckdb"
    run_cli("run", str(spec), "--store", str(store), "--ops-module", str(ops_file),
            "--executor", "ray", "--address", cluster.address, "--ray-resource", "GPU",
            "--chunk", "16", check=True)
    with Store(store) as st:
        df = st.results()
    assert len(df) == 10 and df["vector_id"].nunique() == 10
    status = dict(zip(df["i"], df["status"], strict=True))
    assert status == {i: "crash" if i == 4 else "ok" for i in range(10)}
    message = df.loc[df["i"] == 4, "message"].iloc[0]
    assert "died 3 times" in message


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
