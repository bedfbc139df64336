"""Session 39: what a user meets at the edges of the run and model commands."""

from __future__ import annotations

import pytest

from conftest import cli_in_process, write_spec
from opatlas.store import Store


def test_an_empty_part_of_a_job_array_is_said_and_exits_0(tmp_path, capsys):
    """A job array of more tasks than vectors: the empty tasks succeed, and say why nothing
    ran; a part that holds vectors says nothing of the kind."""
    spec = write_spec(tmp_path / "f.yml", {"op": "fault", "params": {"i": [0, 1, 2]},
                                           "repeats": 1, "warmup": 0, "dtype": "fp32"})
    store = tmp_path / "p.duckdb"
    code, out, err = cli_in_process(capsys, "run", str(spec), "--parts", "100", "--part", "99",
                                    "--store", str(store))
    assert code == 0, err
    assert "f: 0 vectors" in out
    assert "part 99 of 100 holds no valid vector of f: part k of n takes the grid points" in err
    assert "--where" not in err and "nothing was run" in err
    with Store(store, read_only=True) as st:
        assert st.count() == 0


def test_counts_of_huge_shapes_never_wrap_around():
    """A table of shapes is counted with arrays; int64 wrapped past 9.2e18 (dim=2**62 gave a
    negative FLOP count and a floored 6 µs prediction). Each row must equal the count of its
    shape alone (Python numbers, which never wrap), to float64's precision."""
    import numpy as np

    from opatlas.ops import get_op
    from opatlas.ops.batch import count_columns

    op, fixed = get_op("linear1")
    dims = [4096, 2**31 + 1, 2**62]
    table = {"mp": np.array([1, 2, 1]), "b": np.array([4, 1, 1]), "l": np.array([2048, 8, 2048]),
             "dim": np.array(dims)}
    cols = count_columns("linear1", table)
    for i in range(len(dims)):
        shape = {**op.defaults, **fixed, "dtype": "fp32",
                 **{k: int(v[i]) for k, v in table.items()}}
        exact = op.flops(shape)["fwd"]
        assert exact > 0
        assert cols["flops_fwd"][i] == pytest.approx(exact, rel=1e-12)
        assert cols["bytes_fwd"][i] == pytest.approx(op.min_bytes(shape)["fwd"], rel=1e-12)
    assert cols["flops_fwd"][0] == op.flops({**op.defaults, **fixed, "dtype": "fp32", "mp": 1,
                                             "b": 4, "l": 2048, "dim": 4096})["fwd"]  # exact


def test_results_to_standard_output_say_so_on_stderr(tmp_path, capsys):
    """``--out -`` puts the data alone on stdout; stderr names standard output, not "-"."""
    from opatlas.store import ResultRow
    from opatlas.sweep import params_json, vector_id

    store = tmp_path / "r.duckdb"
    with Store(store) as st:
        st.add_results([ResultRow(vector_id=vector_id("noop", {"i": 0}), op="noop",
                                  params_json=params_json({"i": 0}), pass_="fwd",
                                  backend="cpu", device="cpu0", dtype="fp32", status="ok",
                                  repeats=1, median_ns=5.0)])
    for fmt, said in (("csv", "wrote 1 row to standard output"),
                      ("table", "wrote a table of 1 row to standard output")):
        code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--format",
                                        fmt, "--out", "-")
        assert code == 0, err
        assert err.strip() == said and "noop" in out and "wrote" not in out


def test_counts_no_op_can_have_are_recorded_as_unknown_and_said_once(monkeypatch):
    """A user op's formula gone wrong (negative, NaN, infinite) must not be stored as a FLOP
    count (a GFLOP/s that means nothing): the row keeps its time, the count is unknown."""
    import warnings

    from opatlas.ops import registry

    monkeypatch.setattr(registry, "_BAD_COUNTS_SAID", set())
    counts = {"fwd": -4, "bwd": float("nan"), "step": float("inf"), "opt": 12, "zero": 0,
              "text": "many"}
    with pytest.warns(UserWarning) as said:
        assert registry._real_counts("probe_s39", "flops", counts) == {"opt": 12, "zero": 0}
    assert len(said) == 4 and "probe_s39 fwd: its flops() gave -4, which is no count" in str(
        said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per (op, pass, kind)
        registry._real_counts("probe_s39", "flops", counts)
    assert registry.catalog_counts("linear1", {"mp": 1, "b": 1, "l": 8, "dim": 64})[0]["fwd"] > 0


def test_the_guarded_worker_imports_neither_the_runner_nor_pandas():
    """Every worker start (and restart after a crash or a timeout) imports
    ``opatlas.run.worker``; the runner, the store and pandas cost it half a second. The
    package's exports and submodules still resolve on first use."""
    import subprocess
    import sys

    code = ("import sys\nimport opatlas.run.worker\n"
            "print(sorted(m for m in ('pandas', 'duckdb', 'opatlas.run.runner', "
            "'opatlas.store.db') if m in sys.modules))\n"
            "import opatlas.run as r\n"
            "print(r.runner.__name__, r.RunConfig.__module__, 'run_spec' in dir(r))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["[]", "opatlas.run.runner opatlas.run.runner True"]
    import opatlas.run

    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        opatlas.run.nope  # noqa: B018


def test_fit_threads_sets_every_large_fits_threads_and_leaves_the_models_alone(capsys,
                                                                               tmp_path):
    """``opatlas fit --threads N``: fits on 1,000 rows or more take N threads (small ones one),
    the metrics are those of the default; reshard refuses it; 0 is refused."""
    import json

    from opatlas.fit import recipes

    with recipes.fit_threads_as(4):
        assert recipes.gbm_params(recipes.SMALL_FIT_ROWS)["n_jobs"] == 4
        assert recipes.gbm_params(recipes.SMALL_FIT_ROWS - 1)["n_jobs"] == 1
        assert recipes.gbm_params(10**6, threads=3)["n_jobs"] == 3  # a pool's own count
    assert recipes.gbm_params(recipes.SMALL_FIT_ROWS)["n_jobs"] == 2
    args = ("fit", "--op", "layernorm", "--no-baseline", "--json")
    runs = []
    for extra in ((), ("--threads", "1")):
        code, out, err = cli_in_process(capsys, *args, *extra)
        assert code == 0, err
        runs.append(json.loads(out))
    assert runs[0] == runs[1] and runs[0]
    assert recipes.fit_threads() == 2  # the default again for the next command
    code, _, err = cli_in_process(capsys, "fit", "--recipe", "reshard", "--threads", "2",
                                  "--data", str(tmp_path / "x.csv"))
    assert code == 2 and "--threads applies only to the op models" in err
    code, _, err = cli_in_process(capsys, "fit", "--threads", "0")
    assert code == 2 and "--threads" in err


def test_a_package_folder_travels_to_ray_workers_like_a_file(tmp_path, monkeypatch):
    """``--ops-module mypkg`` (a package in the current folder) ships in the job's runtime env
    as a ``.py`` file does, imported on the workers by its name; an installed dotted module is
    only named."""
    from opatlas.run.ray_executor import shipped_ops_modules

    pkg = tmp_path / "mypkg_ray39"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (tmp_path / "one_ray39.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert shipped_ops_modules(["mypkg_ray39", "one_ray39.py", "my_pkg.ops"]) == (
        [str(pkg.resolve()), str((tmp_path / "one_ray39.py").resolve())],
        ["mypkg_ray39", "one_ray39", "my_pkg.ops"])


def test_a_call_that_ended_before_its_worker_died_is_recorded_not_blamed():
    """Two calls in flight on one worker: the first ended (its answer not read yet), the second
    killed the worker. The first is recorded as it ended and the second's chunks are the ones
    run again (and charged a death), not the other way round: the executor blamed the oldest
    call in flight, so a vector that ran fine beside a killer became a crash after 3 tries."""
    from collections import deque
    from types import SimpleNamespace

    from opatlas.run.ray_executor import RayDispatcher, _Call, _Chunk, _Slot

    class FakeRay:
        def wait(self, refs, num_returns, timeout):
            assert timeout == 0
            return [r for r in refs if r != "killer"], []

        def get(self, ref):
            if ref == "fine":
                return ["fine's results"]
            raise RuntimeError("actor died")

        def kill(self, handle):
            pass

    handle = SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: "a1"))
    slot = _Slot(handle=handle, info=SimpleNamespace(device="dev"))
    fine = _Call(slot, [_Chunk("dev", ["v3"])], seq=0)
    killer = _Call(slot, [_Chunk("dev", ["v4"])], seq=1)
    d = object.__new__(RayDispatcher)
    done, retried = [], []
    d.ray, d.slots, d.calls = FakeRay(), {}, {"fine": fine, "killer": killer}
    d.summary = SimpleNamespace(retried_chunks=0)
    d.queues = {"dev": SimpleNamespace(again=deque())}
    d._done = lambda call, results: done.append((call, results))
    d._retry = lambda chunk, error: retried.append(chunk.vectors)
    d.calls.pop("killer")  # as _finished pops the call whose answer was the death
    d._worker_lost(killer, "actor died")
    assert done == [(fine, ["fine's results"])] and slot.in_flight == -1
    assert retried == [["v4"]] and d.calls == {}


def test_the_search_table_does_not_import_matplotlib():
    """The search's table takes its layout labels from ``opatlas.estimate.plot``, whose
    module-level pyplot import cost the command 0.3 s; only ``plot_breakdown`` needs it."""
    import subprocess
    import sys

    code = ("import sys\nfrom opatlas.cli import main\n"
            "try:\n    main(['estimate', 'llama2-7b', '--search', '--gpus', '8', '--top', '2'])\n"
            "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print('matplotlib' in sys.modules, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == "False", proc.stderr
    assert "dp" in proc.stdout  # the table was printed
