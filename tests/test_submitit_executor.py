"""``--executor submitit``: a job array of local processes (submitit's local cluster, the same
code path as SLURM's array tasks); every vector once, failures recorded, the same rows as the
local run, resume, shards left by a dead driver or task merged once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli, write_spec
from opatlas.errors import OpatlasError
from opatlas.run import RunConfig, run_spec
from opatlas.spec import spec_from_mapping
from opatlas.store import Store

pytest.importorskip("submitit")
from opatlas.run.submitit_executor import (
    SubmititConfig,
    _finish,
    run_spec_submitit,
    shard_paths,
)

N = 12
CRASH_AT, HANG_AT = 3, 5
COLS = ["vector_id", "pass", "status", "backend", "device", "dtype", "repeats"]


def fault_spec(n: int = N) -> dict:
    return {"name": "faults", "op": "fault", "params": {"i": list(range(n))},
            "fixed": {"crash_at": CRASH_AT, "hang_at": HANG_AT}, "repeats": 2, "warmup": 0}


def quiet() -> RunConfig:
    return RunConfig(timeout_s=1.5, interactive=False, log_every=10**6)


def rows(df) -> list[tuple]:
    return sorted(map(tuple, df[COLS].astype(str).to_numpy()))


@pytest.fixture(scope="module")
def array_run(tmp_path_factory):
    """Three local array tasks, then the same command again (a resume with nothing left)."""
    tmp = tmp_path_factory.mktemp("submitit")
    spec = spec_from_mapping(fault_spec())
    scfg = SubmititConfig(jobs=3, folder=tmp / "shards", cluster="local", poll_s=0.2)
    with Store(tmp / "array.duckdb") as st:
        first = run_spec_submitit(spec, st, quiet(), scfg)
        again = run_spec_submitit(spec, st, quiet(), scfg)
        df = st.results()
    return spec, first, again, df, scfg.folder


def test_every_vector_recorded_once_with_failures(array_run):
    _, first, _, df, _ = array_run
    assert first.total == N and first.ran == N and first.skipped == 0
    assert len(df) == N and df["vector_id"].nunique() == N
    by_i = df.set_index("i")
    assert by_i.loc[CRASH_AT, "status"] == "crash" and by_i.loc[HANG_AT, "status"] == "timeout"
    assert first.statuses == {"ok": N - 2, "crash": 1, "timeout": 1}
    assert not first.failed_earlier  # nothing was stored before it
    assert len(first.nodes) == 3  # one row per array task
    assert sum(n.vectors for n in first.nodes.values()) == N
    assert sum(n.failures for n in first.nodes.values()) == 2


def test_resume_runs_nothing_and_shards_are_gone(array_run):
    _, _, again, df, folder = array_run
    assert again.ran == 0 and again.skipped == N and again.total == N
    # the resume counts what it skipped as failed earlier (--retry-failed runs them again)
    assert again.failed_earlier == {"crash": 1, "timeout": 1}
    assert len(df) == N
    assert not list(folder.glob("part-*"))  # merged shards are removed


def test_same_rows_as_the_local_run(array_run, tmp_path):
    spec, _, _, df, _ = array_run
    with Store(tmp_path / "local.duckdb") as st:
        run_spec(spec, st, quiet())
        local = st.results()
    assert rows(df) == rows(local)


def test_shards_left_by_an_earlier_run_are_merged_once_and_not_run_again(tmp_path, capsys):
    """A driver killed after its tasks ended left part-7's store: the next run merges it first
    and its vectors are not run again."""
    spec = spec_from_mapping({**fault_spec(), "fixed": {}})
    folder = tmp_path / "shards"
    folder.mkdir()
    left, _ = shard_paths(folder, 7)
    with Store(left) as st:
        run_spec(spec, st, quiet(), parts=2, part=1)  # half of the sweep
        held = st.count_results()
    with Store(tmp_path / "main.duckdb") as st:
        summary = run_spec_submitit(spec, st, quiet(),
                                    SubmititConfig(jobs=2, folder=folder, cluster="debug"))
        df = st.results()
    assert held == N // 2
    assert "merging 1 shard(s) left" in capsys.readouterr().err
    assert summary.ran == N - held and summary.skipped == held
    assert len(df) == N and df["vector_id"].nunique() == N and summary.duplicate_rows == 0


class _DeadTask:
    def result(self):
        raise RuntimeError("Job (task=0) failed during processing with trace:\nDUE TO TIME LIMIT")


def test_a_task_that_died_gives_back_what_it_recorded(tmp_path, capsys):
    spec = spec_from_mapping({**fault_spec(), "fixed": {}})
    folder = tmp_path / "shards"
    folder.mkdir()
    db, shard = shard_paths(folder, 2)
    # the task's process ends without closing its store (killed): a WAL is left to replay
    code = (f"import os\nfrom opatlas.store import Store\nfrom opatlas.run import RunConfig, run_spec\n"
            f"from opatlas.spec import spec_from_mapping\n"
            f"st = Store({str(db)!r})\n"
            f"run_spec(spec_from_mapping({spec.model_dump(mode='json', exclude_none=True)!r}), st, "
            f"RunConfig(timeout_s=3.0, interactive=False, log_every=10**6), parts=3, part=2)\n"
            f"os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert db.with_name(db.name + ".wal").exists()
    from opatlas.run.runner import RunSummary

    summary = RunSummary()
    with Store(tmp_path / "main.duckdb") as st:
        _finish(st, _DeadTask(), 2, folder, summary)
        assert st.count_results() == N // 3
    err = capsys.readouterr().err
    assert "task 2 failed" in err and "DUE TO TIME LIMIT" in err and "run the same" in err
    assert not db.exists() and not shard.exists()


def test_without_submitit_the_hint_says_how_to_install(monkeypatch):
    from opatlas.run import submitit_executor

    monkeypatch.setitem(sys.modules, "submitit", None)
    with pytest.raises(OpatlasError, match=r"pip install 'opatlas\[slurm\]'"):
        submitit_executor.import_submitit()


def test_cli_refuses_parts_and_bad_options(tmp_path: Path):
    spec = write_spec(tmp_path / "s.yml", fault_spec(2))
    proc = run_cli("run", str(spec), "--executor", "submitit", "--parts", "2", "--part", "1",
                   "--store", str(tmp_path / "s.duckdb"))
    assert proc.returncode == 2 and "drop --parts/--part" in proc.stderr
    proc = run_cli("run", str(spec), "--executor", "submitit", "--submitit-opt", "nokey",
                   "--store", str(tmp_path / "s.duckdb"))
    assert proc.returncode == 2 and "--submitit-opt 'nokey': expected key=value" in proc.stderr
    proc = run_cli("run", str(spec), "--executor", "submitit", "--submitit-cluster", "lsf",
                   "--store", str(tmp_path / "s.duckdb"))
    assert proc.returncode == 2 and "expected one of slurm, local, debug" in proc.stderr
