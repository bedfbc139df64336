"""Review s36 of ``--executor submitit``: refused options are one line (exit 2) and leave
nothing behind; a failed task says its own error, once; a local fallback warns that the
tasks share this machine's cores; a finished sweep submits nothing on resume."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import cli_in_process, write_spec
from opatlas.errors import OpatlasError
from opatlas.run import RunConfig
from opatlas.run.runner import RunSummary
from opatlas.spec import spec_from_mapping
from opatlas.store import Store

submitit = pytest.importorskip("submitit")
from opatlas.pool import usable_cores  # noqa: E402
from opatlas.run.submitit_executor import (  # noqa: E402
    SubmititConfig,
    _collect,
    _executor,
    run_spec_submitit,
)

no_slurm = pytest.mark.skipif(shutil.which("srun") is not None, reason="SLURM is here")
SPEC = {"name": "s36", "op": "fault", "params": {"i": [0, 1, 2, 3]}, "repeats": 1, "warmup": 0}


def quiet() -> RunConfig:
    return RunConfig(timeout_s=1.5, interactive=False, log_every=10**6)


def refused(capsys, tmp_path: Path, *opts: str) -> str:
    spec = write_spec(tmp_path / "s.yml", SPEC)
    store = tmp_path / "s.duckdb"
    code, _, err = cli_in_process(capsys, "run", str(spec), "--executor", "submitit",
                                  "--store", str(store), *opts)
    assert code == 2 and "Traceback" not in err
    assert not store.exists() and not (tmp_path / "s.duckdb.submitit").exists()
    return err.strip().splitlines()[-1]


@no_slurm
def test_slurm_cluster_without_srun_is_one_line(capsys, tmp_path):
    assert refused(capsys, tmp_path, "--submitit-cluster", "slurm") == (
        "opatlas: error: --submitit-cluster 'slurm': no SLURM here (no srun on PATH); "
        "--submitit-cluster local runs the tasks on this machine")


def test_submitit_opt_of_the_wrong_type_is_one_line(capsys, tmp_path):
    assert refused(capsys, tmp_path, "--submitit-cluster", "local", "--submitit-opt",
                   "timeout_min=abc") == (
        "opatlas: error: --submitit-opt: Parameter \"timeout_min\" expected type "
        "<class 'int'> (but value: \"abc\")")


def test_unknown_submitit_opt_and_cluster_leave_nothing(capsys, tmp_path):
    line = refused(capsys, tmp_path, "--submitit-cluster", "local", "--submitit-opt", "foo=1")
    assert line.startswith("opatlas: error: --submitit-opt: Parameter 'foo' need to be "
                           "prefixed by an executor name. Known executors: slurm, local, debug")
    assert refused(capsys, tmp_path, "--submitit-cluster", "foo") == (
        "opatlas: error: --submitit-cluster 'foo': expected one of slurm, local, debug")


TRACE = ("Job (task=0) failed during processing with trace:\n----------------------\n"
         "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
         "    raise OpatlasError(f\"backend {name!r} cannot run here: {why}\")\n"
         "opatlas.errors.OpatlasError: backend 'cuda' cannot run here: no CUDA device\n"
         "----------------------\nYou can check full logs with 'job.stderr(0)' and "
         "'job.stdout(0)'or at paths:\n  - {err}\n  - {out}")


class _Paths:
    def __init__(self, folder: Path, part: int) -> None:
        self.stderr = folder / f"{part}_0_log.err"


class _FailedJob:
    def __init__(self, folder: Path, part: int, trace: str) -> None:
        self.paths = _Paths(folder, part)
        self.trace = trace.replace("{err}", str(self.paths.stderr))

    def done(self) -> bool:
        return True

    def result(self):
        raise submitit.core.utils.FailedJobError(self.trace)


def test_every_task_failing_on_purpose_says_its_error_once(tmp_path, capsys):
    jobs = {k: _FailedJob(tmp_path, k, TRACE) for k in (1, 2, 3)}
    with Store(tmp_path / "m.duckdb") as st, pytest.raises(OpatlasError) as err:
        _collect(st, jobs, tmp_path, RunSummary(), 0.0)
    assert str(err.value) == (
        "every task failed: OpatlasError: backend 'cuda' cannot run here: no CUDA device "
        "(nothing ran; running the same command again fails the same way)")
    said = capsys.readouterr().err
    assert said.count("cannot run here") == 1
    assert (f"task 1 failed: OpatlasError: backend 'cuda' cannot run here: no CUDA device "
            f"(log: {tmp_path / '1_0_log.err'})") in said
    assert "run the same command again" not in said and "task 2" not in said
    assert "all 3 task(s) ended, 3 failed the same way; 0 vectors run" in said


def test_a_crash_in_the_log_is_named_and_a_rerun_suggested(tmp_path, capsys):
    trace = "Job (task=0) has not produced any output (state: FAILED)"
    (tmp_path / "1_0_log.err").write_text("Traceback (most recent call last):\n  x\n"
                                          "MemoryError: out of host memory\n")
    summary = RunSummary()
    with Store(tmp_path / "m.duckdb") as st:
        _collect(st, {1: _FailedJob(tmp_path, 1, trace)}, tmp_path, summary, 0.0)
    said = capsys.readouterr().err
    assert f"task 1 failed: MemoryError: out of host memory (log: {tmp_path / '1_0_log.err'})" \
        in said
    assert "run the same command again to run the rest" in said
    assert summary.failed_tasks == ["task 1"]


@no_slurm
def test_local_fallback_warns_that_the_tasks_share_the_cores(tmp_path, capsys):
    executor = _executor(submitit, SubmititConfig(jobs=3, folder=tmp_path), tmp_path)
    assert executor.cluster == "local"
    assert (f"opatlas: submitit: warning: no SLURM here (no srun on PATH): the 3 tasks run at "
            f"once as processes on this machine (submitit's local cluster), sharing its "
            f"{usable_cores()} CPU core") in capsys.readouterr().err


@no_slurm
def test_local_fallback_warning_names_the_contention(tmp_path, capsys):
    _executor(submitit, SubmititConfig(jobs=3, folder=tmp_path), tmp_path)
    assert "CPU timings then contend for its cores (--jobs 1 does not)" in \
        capsys.readouterr().err


def test_a_finished_sweep_submits_nothing(tmp_path, capsys):
    spec = spec_from_mapping(SPEC)
    scfg = SubmititConfig(jobs=2, folder=tmp_path / "shards", cluster="local", poll_s=0.2)
    with Store(tmp_path / "a.duckdb") as st:
        first = run_spec_submitit(spec, st, quiet(), scfg)
        capsys.readouterr()
        again = run_spec_submitit(spec, st, quiet(), scfg)
    said = capsys.readouterr().err
    assert first.ran == 4
    assert again.ran == 0 and again.skipped == 4 and again.total == 4
    assert "submitted" not in said and "nothing to submit" in said
    assert "the store holds every vector of this sweep for cpu on " in said
