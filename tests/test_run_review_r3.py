"""Review round 3 of ``opatlas run``: progress while a sweep is recorded, an interrupt keeps
the recorded sweep and says what is kept where, a failed submitit task's vectors are counted
(and the run fails), no SLURM is said, empty job-array parts are said and not submitted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import cli_in_process, write_spec
from opatlas.cli.run_cmd import interrupted_kept
from opatlas.run import RunConfig
from opatlas.run.plan import grid_points, record_sweep
from opatlas.spec import spec_from_mapping
from opatlas.store import Store
from opatlas.store.writing import store_for_writing

N = 12


def plain(n: int = N) -> dict:
    return {"name": "plain", "op": "fault", "params": {"i": list(range(n))}, "repeats": 1,
            "warmup": 0}


def test_recording_shows_its_progress_once_it_lasts(tmp_path, capsys):
    spec = spec_from_mapping(plain())
    with Store(tmp_path / "s.duckdb") as st:
        plan = record_sweep(spec, st, parts=2, part=1, quiet_s=0.0)
    err = capsys.readouterr().err
    assert "recording the sweep plain in the store | 6/6=100.00%" in err
    assert plan.valid == 6
    assert grid_points(plan.stream()) == 6
    assert grid_points(plan.stream().__class__(spec, where="i < 3")) is None  # not known
    with Store(tmp_path / "q.duckdb") as st:  # a quick one says nothing
        record_sweep(spec, st)
    assert "recording" not in capsys.readouterr().err


def test_an_interrupt_keeps_a_recorded_sweep_and_removes_an_empty_store(tmp_path):
    spec = spec_from_mapping(plain())
    kept, empty = tmp_path / "kept.duckdb", tmp_path / "empty.duckdb"
    with pytest.raises(KeyboardInterrupt), store_for_writing(kept, keep_recorded_sweep=True) as st:
        record_sweep(spec, st)
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt), store_for_writing(empty, keep_recorded_sweep=True):
        raise KeyboardInterrupt
    assert kept.exists() and not empty.exists()
    with Store(kept, read_only=True) as st:
        assert st.count("vectors") == N and st.count() == 0
    said = interrupted_kept(kept, None)
    assert f"{kept} keeps the sweep recorded so far ({N} vectors)" in said
    assert said.endswith("run the same command again to resume")
    assert interrupted_kept(empty, None) == (f"nothing was recorded and no store is left at "
                                             f"{empty}")


def test_a_failure_other_than_an_interrupt_leaves_no_store_without_results(tmp_path):
    spec = spec_from_mapping(plain())
    path = tmp_path / "f.duckdb"
    with pytest.raises(RuntimeError), store_for_writing(path, keep_recorded_sweep=True) as st:
        record_sweep(spec, st)
        raise RuntimeError("cluster unreachable")
    assert not path.exists()


def test_cli_interrupted_while_running_keeps_the_store(tmp_path, capsys, monkeypatch):
    from opatlas.run import runner

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.Runner, "run", interrupted)
    spec = write_spec(tmp_path / "s.yml", plain())
    store = tmp_path / "i.duckdb"
    code, _, err = cli_in_process(capsys, "run", str(spec), "--store", str(store))
    assert code == 130 and store.exists(), err
    assert f"keeps the sweep recorded so far ({N} vectors), no result yet; run the same " \
           f"command again to resume" in err


def test_interrupt_names_the_task_rows_the_next_run_merges(tmp_path):
    folder = tmp_path / "s.duckdb.submitit"
    folder.mkdir()
    pytest.importorskip("pyarrow")
    pd.DataFrame({"x": range(12)}).to_parquet(folder / "part-2.parquet")
    said = interrupted_kept(tmp_path / "s.duckdb", folder)
    assert said == (f"nothing was recorded and no store is left at {tmp_path / 's.duckdb'}; "
                    f"the tasks' 12 result row(s) in {folder} are merged into the store by "
                    f"the next run (tasks still running on SLURM go on); run the same command "
                    f"again to resume")


submitit = pytest.importorskip("submitit")
from opatlas.run import submitit_executor as se  # noqa: E402


def _dies_halfway(real):
    """run_part, except that part 2 runs only its vectors with i < 6 and then fails."""
    def run_part(spec, config, jobs, part, where, folder):
        if part != 2:
            return real(spec, config, jobs, part, where, folder)
        real(spec, config, jobs, part, "i < 6", folder)
        (Path(folder) / "part-2.parquet").unlink()  # died before its shard: its store left
        raise RuntimeError("killed")
    return run_part


class _Job:
    """A task run when its result is asked for, in this process (submitit's debug executor
    drops into pdb on a failure)."""

    job_id = "7_0"

    def __init__(self, fn, args) -> None:
        self.fn, self.args = fn, args

    def done(self) -> bool:
        return True

    def result(self):
        return self.fn(*self.args)


class _Executor:
    cluster = "fake"

    def map_array(self, fn, *lists):
        return [_Job(fn, args) for args in zip(*lists, strict=True)]


@pytest.fixture
def in_process(monkeypatch):
    monkeypatch.setattr(se, "_executor", lambda *_a: _Executor())


def quiet() -> RunConfig:
    return RunConfig(timeout_s=10.0, interactive=False, log_every=10**6)


def test_a_failed_task_is_counted_and_what_it_left_is_said(tmp_path, capsys, monkeypatch,
                                                           in_process):
    monkeypatch.setattr(se, "run_part", _dies_halfway(se.run_part))
    spec = spec_from_mapping(plain())
    scfg = se.SubmititConfig(jobs=2, folder=tmp_path / "sh", poll_s=0.05)
    with Store(tmp_path / "a.duckdb") as st:
        summary = se.run_spec_submitit(spec, st, quiet(), scfg)
        assert st.count() == 9
    # part 1 ran i = 0, 2, ..., 10; part 2 recorded 1, 3, 5 before it died; 7, 9, 11 are left
    assert (summary.total, summary.ran, summary.skipped, summary.not_run) == (12, 9, 0, 3)
    assert summary.statuses == {"ok": 9} and summary.failed_tasks == ["task 2"]
    assert summary.nodes["part-2 (failed)"].vectors == 3
    assert "task 2: 3 vectors recovered" in capsys.readouterr().err


def test_cli_exits_non_zero_when_a_task_failed(tmp_path, capsys, monkeypatch, in_process):
    monkeypatch.setattr(se, "run_part", _dies_halfway(se.run_part))
    spec = write_spec(tmp_path / "s.yml", plain())
    code, out, err = cli_in_process(capsys, "run", str(spec), "--store", str(tmp_path / "c.duckdb"),
                                    "--executor", "submitit", "--jobs", "2",
                                    "--submitit-cluster", "local")
    assert code == 1, err
    assert "12 vectors; 0 already in the store; ran 9 (ok 9)" in out and "; 3 not run" in out
    assert err.splitlines()[-1] == ("opatlas: task 2 failed; 3 vectors not run: run the same "
                                    "command again to run them")


def test_without_slurm_it_says_the_tasks_run_here(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun
    executor = se._executor(submitit, se.SubmititConfig(folder=tmp_path), tmp_path)
    err = capsys.readouterr().err
    assert executor.cluster == "local"
    assert "no SLURM here (no srun on PATH): the 4 tasks run at once as processes on this " \
        "machine" in err and "contend for its cores" in err
    se._executor(submitit, se.SubmititConfig(cluster="local", folder=tmp_path), tmp_path)
    assert capsys.readouterr().err == ""  # asked for: nothing to say


def test_empty_parts_are_said_and_not_submitted(tmp_path, capsys):
    assert se.parts_to_submit([0, 5, 0, 0], "dim == 1024") == [2]
    err = capsys.readouterr().err
    assert "part(s) 1, 3-4 of 4 hold no vector of this --where" in err
    assert "submitting 1 task, not 4" in err
    assert se.parts_to_submit([10, 3, 10], None) == [1, 2, 3]
    assert "unbalanced: 3 to 10 vectors per task" in capsys.readouterr().err
    assert se.parts_to_submit([4, 4, 3], None) == [1, 2, 3]
    assert capsys.readouterr().err == ""


def test_a_where_that_falls_in_one_part_runs_one_task(tmp_path, capsys, in_process):
    spec = spec_from_mapping(plain())
    scfg = se.SubmititConfig(jobs=4, folder=tmp_path / "sh", poll_s=0.05)
    with Store(tmp_path / "w.duckdb") as st:
        assert record_sweep(spec, st, where="i == 4 or i == 8", split=4).part_sizes == (2, 0, 0, 0)
        summary = se.run_spec_submitit(spec, st, quiet(), scfg, where="i == 4 or i == 8")
    err = capsys.readouterr().err
    assert "part(s) 2-4 of 4 hold no vector" in err and "submitted 1 task(s)" in err
    assert (summary.ran, summary.statuses) == (2, {"ok": 2})


def test_a_new_store_left_unreadable_keeps_the_real_error(tmp_path):
    """A failure that leaves the new store unreadable (a full disk, a damaged file) is raised
    as itself, the store kept (not ours to judge), not hidden behind a TypeError."""
    path = tmp_path / "s.duckdb"
    with pytest.raises(RuntimeError, match="the real cause"), \
            store_for_writing(path, keep_recorded_sweep=True):
        path.write_bytes(b"not a duckdb file " * 4096)
        raise RuntimeError("the real cause")
    assert path.exists()
