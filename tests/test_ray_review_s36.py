"""Review s36 of ``--executor ray``: a bad backend option refused before Ray starts and the worker's
own message said when one dies at creation; Ray CPU workers timed with the local runner's
threads, always recorded; RayConfig checked when built. None of these tests starts Ray."""

from __future__ import annotations

import json
import os

import pytest

from conftest import cli_in_process, write_spec
from opatlas.backends.cpu import CpuBackend, default_threads
from opatlas.errors import OpatlasError
from opatlas.run.ray_executor import RayConfig, _short
from opatlas.run.ray_worker import DeviceWorker
from opatlas.run.runner import Measurement

LINEAR = {"name": "lin", "op": "linear", "dtype": "fp32", "repeats": 2, "warmup": 0,
          "params": {"role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": [512]}}


# -- 5: a bad backend option is refused up front, whatever the executor -------------------------

@pytest.mark.parametrize("executor", ["ray", "submitit"])
def test_an_unknown_backend_option_is_refused_before_the_store_for_every_executor(
        capsys, tmp_path, monkeypatch, executor):
    import opatlas.run.ray_executor as rx

    def no_ray() -> None:
        raise AssertionError("Ray was imported for a command that must fail before it")

    monkeypatch.setattr(rx, "import_ray", no_ray)
    spec = write_spec(tmp_path / "lin.yml", LINEAR)
    store = tmp_path / "s.duckdb"
    code, out, err = cli_in_process(capsys, "run", str(spec), "--store", str(store),
                                    "--executor", executor, "--backend-opt", "threadz=1")
    assert code == 2, (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "backend 'cpu': unknown option(s) threadz; it takes threads" in lines[0]
    assert "Traceback" not in err
    assert not store.exists()


# A worker whose __init__ raised, as ray.get reports it (Ray 2.60; colours included).
RAY_CREATION_FAILURE = (
    "The actor died because of an error raised in its creation task, \x1b[36mray::DeviceWorker"
    ".__init__()\x1b[39m (pid=6825, ip=192.0.2.2, actor_id=5951e9ad, repr=<DeviceWorker>)\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    "\x1b[36mray::DeviceWorker.__init__()\x1b[39m (pid=6825, ip=192.0.2.2)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/x/opatlas/run/ray_worker.py", line 84, in __init__\n'
    "opatlas.errors.OpatlasError: backend 'cpu': bad option(s) {'threads': 'x'}: invalid literal")


class ActorDiedError(Exception):
    pass


def test_a_worker_that_died_at_creation_is_said_with_its_own_message():
    said = _short(ActorDiedError(RAY_CREATION_FAILURE))
    assert said == ("ActorDiedError: OpatlasError: backend 'cpu': bad option(s) "
                    "{'threads': 'x'}: invalid literal")


def test_a_task_error_is_said_by_what_the_task_raised_and_a_plain_error_by_its_first_line():
    class RayTaskError(Exception):
        def __init__(self, cause: BaseException) -> None:
            super().__init__("ray::f()\n  File \"x.py\", line 1\nsomething")
            self.cause = cause

    assert _short(RayTaskError(MemoryError("out of host memory"))) == \
        "MemoryError: out of host memory"
    assert _short(ConnectionError("refused\nmore: detail")) == "ConnectionError: refused"


# -- 1: a Ray CPU worker measures with the local runner's threads, always recorded --------------

def test_the_cpu_backend_sets_and_records_its_threads_whether_given_or_not():
    assert 1 <= default_threads() <= len(os.sched_getaffinity(0))
    assert CpuBackend().versions()["threads"] == str(default_threads())
    assert CpuBackend(threads=1).versions()["threads"] == "1"


def test_a_ray_cpu_worker_undoes_rays_one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as Ray sets it in its workers
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    worker = DeviceWorker("cpu", {}, [], Measurement(("fwd",), 1, 0, 60.0))
    try:
        threads = str(default_threads())
        assert os.environ["OMP_NUM_THREADS"] == threads
        assert os.environ["MKL_NUM_THREADS"] == threads
        assert json.loads(worker.info().versions_json)["threads"] == threads
    finally:
        worker.close()
    given = DeviceWorker("cpu", {"threads": "1"}, [], Measurement(("fwd",), 1, 0, 60.0))
    try:
        assert os.environ["OMP_NUM_THREADS"] == "1"
        assert json.loads(given.info().versions_json)["threads"] == "1"
    finally:
        given.close()


# -- 7: RayConfig is checked when built -----------------------------------------------------------

@pytest.mark.parametrize(("field", "value", "said"), [
    ("devices_per_task", 0, "RayConfig devices_per_task=0: expected an integer >= 1"),
    ("chunk", -3, "RayConfig chunk=-3: expected an integer >= 1"),
    ("max_workers", 0, "RayConfig max_workers=0: expected an integer >= 1 (or None: one per "
                       "device)"),
    ("call_s", -1.0, "RayConfig call_s=-1.0: expected a number >= 0"),
])
def test_rayconfig_refuses_a_bad_field_naming_it(field, value, said):
    with pytest.raises(OpatlasError) as info:
        RayConfig(**{field: value})
    assert str(info.value) == said


def test_rayconfig_takes_its_defaults_and_unset_limits():
    RayConfig(max_workers=None, num_cpus=None)
    assert RayConfig(call_s=1).call_s == 1



def test_a_worker_outside_ray_starts_no_ray():
    ray = pytest.importorskip("ray")
    worker = DeviceWorker("cpu", {}, [], Measurement(("fwd",), 1, 0, 60.0))
    try:
        assert "/" not in worker.info().node  # the host alone, no Ray node id
    finally:
        worker.close()
    assert not ray.is_initialized()
