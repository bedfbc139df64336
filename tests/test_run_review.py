"""A new user's review of running: an op the backend cannot run, failures hidden by a resumed
run's summary, ``collectives --store`` dropping a new measurement silently, and ``run_spec``
called at a script's top level."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import cli_in_process, one_error, write_spec
from opatlas.backends import base
from opatlas.backends.base import backends_for, check_backend_op, register_backend, runs_op
from opatlas.errors import OpatlasError
from opatlas.ops import collectives
from opatlas.run import RunConfig, run_spec
from opatlas.spec import spec_from_mapping
from opatlas.store import Store

LINEAR = {"name": "lin", "op": "linear",
          "params": {"role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": [512]},
          "repeats": 1, "warmup": 0}
FAULTS = {"name": "faults", "op": "fault", "params": {"i": [0, 1, 2, 3]},
          "fixed": {"raise_at": 1, "crash_at": 3}, "repeats": 1, "warmup": 0}


# -- 1. an op the backend cannot run ----------------------------------------------------------

def test_the_registry_says_which_backends_run_an_op(monkeypatch):
    assert backends_for("reshard") == ["wormhole-sim", "ttnn"]
    assert backends_for("linear")[:2] == ["cpu", "cuda"]  # then any a test registered
    assert not {"wormhole-sim", "ttnn"} & set(backends_for("linear"))
    assert not runs_op("cpu", "reshard") and not runs_op("wormhole-sim", "linear")
    monkeypatch.setattr(base, "_BACKENDS", dict(base._BACKENDS))
    monkeypatch.setattr(base, "_BACKEND_OPS", dict(base._BACKEND_OPS))
    register_backend("mysim", "mysim:Sim", ops=["my_op"])
    assert backends_for("my_op") == ["mysim"] and "mysim" not in backends_for("linear")
    with pytest.raises(OpatlasError) as info:
        check_backend_op("cpu", "my_op")
    assert str(info.value) == "backend 'cpu' cannot run op 'my_op'; my_op runs on mysim " \
                              "(--backend mysim)"


def test_reshard_without_its_backend_is_refused_before_a_store_is_written(capsys, tmp_path):
    store = tmp_path / "r.duckdb"
    code, out, err = cli_in_process(capsys, "run", "reshard", "--where",
                                    "input_core_grid == '2x2' and output_core_grid == '1x1'",
                                    "--store", str(store))
    one_error(code, err, "backend 'cpu' cannot run op 'reshard'; reshard runs on wormhole-sim, "
                         "ttnn (--backend wormhole-sim)")
    assert out == "" and not store.exists()


def test_an_op_the_simulator_does_not_simulate_is_refused(capsys, tmp_path):
    spec = write_spec(tmp_path / "lin.yml", LINEAR)
    store = tmp_path / "l.duckdb"
    code, _, err = cli_in_process(capsys, "run", str(spec), "--backend", "wormhole-sim",
                                  "--store", str(store))
    one_error(code, err, "backend 'wormhole-sim' runs only reshard, not op 'linear'; linear "
                         "runs on cpu, cuda (--backend cpu)")
    assert not store.exists()
    with Store(tmp_path / "api.duckdb") as st:  # the Python API refuses it too, before a row
        with pytest.raises(OpatlasError, match="runs only reshard, not op 'linear'"):
            run_spec(spec_from_mapping(LINEAR), st, RunConfig(backend="wormhole-sim"))
        assert st.count() == 0 and st.count("vectors") == 0


# -- 2. a resumed run names the failures it skipped -------------------------------------------

def test_a_resumed_run_counts_the_failures_it_skips_by_status(capsys, tmp_path):
    spec, store = write_spec(tmp_path / "f.yml", FAULTS), str(tmp_path / "f.duckdb")
    code, out, _ = cli_in_process(capsys, "run", str(spec), "--store", store)
    assert code == 0 and "ran 4 (crash 1, error 1, ok 2)" in out
    code, out, _ = cli_in_process(capsys, "run", str(spec), "--store", store)
    assert code == 0 and ("faults: 4 vectors; 4 already in the store (2 failed earlier: crash "
                          "1, error 1; --retry-failed runs them again); ran 0 (nothing to run)"
                          ) in out
    code, out, _ = cli_in_process(capsys, "run", str(spec), "--store", store, "--retry-failed")
    assert code == 0 and "2 already in the store; ran 2 (crash 1, error 1)" in out
    assert "failed earlier" not in out


# -- 3. collectives --store: a size already recorded ------------------------------------------

def _fake_collective(correct: bool, median_ns: int):
    def run(op, sizes, nproc, *, backend, dtype, repeats, link_peak_gbps, **_):
        rows = [{"op": op, "elements": n, "bytes": 4 * n, "world_size": nproc, "dtype": dtype,
                 "backend": backend, "samples_ns": [median_ns] * repeats, "correct": correct}
                for n in sizes]
        return collectives.summarize_samples(rows, link_peak_gbps)
    return run


def _stored(path):
    with Store(path, read_only=True) as st:
        df = st.results(op="collective.all_reduce").sort_values("elements")
    return list(zip(df["elements"], df["status"], df["median_ns"], strict=True))


def test_collectives_say_when_the_store_keeps_its_earlier_answer(capsys, tmp_path, monkeypatch):
    store = tmp_path / "c.duckdb"
    args = ("collectives", "all_reduce", "--nproc", "2", "--repeats", "3", "--store", str(store))
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(True, 400_000))
    code, _, err = cli_in_process(capsys, *args, "--sizes", "4096")
    assert code == 0 and err == ""
    # again, with 512 new and a link peak that flags 4096 (164 MB/s on the bus) invalid
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(True, 100_000))
    code, out, err = cli_in_process(capsys, *args, "--sizes", "4096,512", "--link-peak-gbps",
                                    "0.1")
    assert code == 0 and "4096 el" in out and "invalid bus bandwidth" in out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"opatlas: {store} already holds all_reduce at 4096 elements on 2 "
                               f"ranks (fp32, gloo): ok, 400.0 µs, recorded ")
    assert lines[0].endswith("it keeps that first answer, and this run's (invalid) was not "
                             "stored (use another --store to keep it)")
    assert _stored(store) == [(512, "ok", 100_000.0), (4096, "ok", 400_000.0)]


def test_collectives_replace_a_stored_failure_without_a_note(capsys, tmp_path, monkeypatch):
    store = tmp_path / "c.duckdb"
    args = ("collectives", "all_reduce", "--nproc", "2", "--sizes", "4096", "--store", str(store))
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(False, 400_000))
    assert cli_in_process(capsys, *args)[0] == 0
    assert [s for _, s, _ in _stored(store)] == ["error"]
    monkeypatch.setattr(collectives, "run_collective", _fake_collective(True, 300_000))
    code, _, err = cli_in_process(capsys, *args)
    assert code == 0 and err == ""
    assert _stored(store) == [(4096, "ok", 300_000.0)]


# -- 4. run_spec at a script's top level ------------------------------------------------------

TOP_LEVEL = textwrap.dedent('''
    from opatlas.run import RunConfig, run_spec
    from opatlas.spec import spec_from_mapping
    from opatlas.store import Store

    spec = spec_from_mapping({"op": "fault", "params": {"i": [0, 1, 2]}, "repeats": 1,
                              "warmup": 0})
    with Store("my.duckdb") as st:  # not under if __name__ == "__main__":
        run_spec(spec, st, RunConfig(interactive=False))
''')


def test_run_spec_at_a_scripts_top_level_stops_with_the_fix_not_crashes(tmp_path):
    script = tmp_path / "top.py"
    script.write_text(TOP_LEVEL)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("opatlas.run.worker.WorkerStartError: a worker process died "
                           f"(exit code 1) while importing {script} again"), proc.stderr
    assert 'under `if __name__ == "__main__":`' in last
    with Store(tmp_path / "my.duckdb", read_only=True) as st:
        assert st.count() == 0  # no vector recorded as a crash
