"""A new user's review, round 1: a worker's start-up outside the vector's timeout, ``results
--op`` with an alias that fixes parameters, spec values an op or a backend cannot take, and
``import results --help``."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import cli_in_process, one_error, write_spec
from opatlas.errors import SpecError
from opatlas.run import RunConfig, run_spec
from opatlas.run.runner import check_backend_dtypes
from opatlas.run.worker import WorkerHandle
from opatlas.spec import load_spec, spec_from_mapping
from opatlas.spec.model import SweepSpec
from opatlas.store import ResultRow, Store

# a backend whose start-up takes 3 s; a measure before start() pays it (as PyTorch's import
# was paid by the CPU backend's first vector)
SLOW_START = textwrap.dedent('''
    import time

    from opatlas.backends import register_backend
    from opatlas.backends.base import Backend


    class SlowStart(Backend):
        name = "slowstart"

        def __init__(self):
            self.started = False

        def device_name(self):
            return "slow"

        def start(self):
            if not self.started:
                time.sleep(3.0)
                self.started = True

        def measure(self, op, params, passes, repeats, warmup):
            self.start()
            return {p: [1000] * repeats for p in passes}


    register_backend("slowstart", f"{__name__}:SlowStart")
''')


def test_a_workers_start_up_counts_against_no_vectors_timeout(tmp_path):
    module = tmp_path / "slow_backend.py"
    module.write_text(SLOW_START)
    handle = WorkerHandle("slowstart", [str(module)])
    try:  # 3 s of start-up, 1 s allowed per vector: start() ran before the worker was ready
        outcomes = [handle.run("fault", {"i": i}, ["fwd"], 2, 0, timeout=1.0) for i in range(2)]
    finally:
        handle.close()
    assert [(o.status, o.timings) for o in outcomes] == [("ok", {"fwd": [1000, 1000]})] * 2
    assert handle.restarts == 0


def test_the_cpu_backends_start_pays_pytorchs_lazy_start_up():
    """After start(), a first gelu (forward and backward) imports nothing more of PyTorch or
    of what autograd pulls in (sympy, 0.3 s): none of it lands in a vector's time."""
    pytest.importorskip("torch")
    script = textwrap.dedent('''
        import json, sys
        from opatlas.backends import get_backend
        from opatlas.ops.registry import list_ops, resolved_params
        list_ops()
        backend = get_backend("cpu", threads=1)
        backend.start()
        started = set(sys.modules)
        op, full = resolved_params("gelu", {"b": 1, "l": 16, "dim": 32})
        backend.measure(op, full, op.passes, 1, 0)
        print(json.dumps({"torch": "torch" in started,
                          "later": sorted(set(sys.modules) - started)}))
    ''')
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    seen = json.loads(out.splitlines()[-1])
    assert seen["torch"]
    assert [m for m in seen["later"] if m.split(".")[0] in ("torch", "sympy")] == []


def _linear_rows(store: Path) -> None:
    rows = []
    for i, params in enumerate([{"role": "qkv", "dim": 64}, {"role": "ffn_up", "dim": 64},
                                {"role": "qkv", "dim": 128}, {"dim": 256}]):  # default: qkv
        rows.append(ResultRow(f"v{i}", "linear", json.dumps(params), "fwd", "cpu", "X",
                              "fp32", "ok", repeats=1, median_ns=1.0))
    rows.append(ResultRow("g", "gelu", "{}", "fwd", "cpu", "X", "fp32", "ok", repeats=1,
                          median_ns=1.0))
    with Store(store) as st:
        st.add_results(rows)


def test_results_op_alias_keeps_only_the_rows_of_its_fixed_parameters(capsys, tmp_path):
    store = tmp_path / "s.duckdb"
    _linear_rows(store)
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--op",
                                    "linear1", "--format", "json")
    assert code == 0
    assert "note: --op linear1: the store files it as 'linear' (its rows with role=qkv)" in err
    assert sorted(r["vector_id"] for r in json.loads(out)) == ["v0", "v2", "v3"]
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--op",
                                    "linear3", "--format", "json")
    assert [r["vector_id"] for r in json.loads(out)] == ["v1"]
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--op",
                                    "linear2")  # role out: none here
    assert code == 0 and "0 result rows" in out


OPS_WITH_CHOICES = textwrap.dedent('''
    from opatlas.ops import Op, register_op


    @register_op
    class Picky(Op):
        name = "picky_review_r1"
        params = ("n", "mode")
        choices = {"mode": ("fast", "slow")}
''')


def test_a_value_outside_an_ops_choices_is_refused_at_load(tmp_path):
    from opatlas.ops import load_ops_module

    module = tmp_path / "picky.py"
    module.write_text(OPS_WITH_CHOICES)
    load_ops_module(module)
    spec = {"name": "p", "op": "picky_review_r1", "params": {"n": [1], "mode": ["fast", "fsat"]}}
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(tmp_path / "p.yml", spec))
    assert str(info.value) == (f"In file {tmp_path / 'p.yml'}, key 'params.mode', value "
                               f"'fsat': not a mode op 'picky_review_r1' takes; one of fast, "
                               f"slow")
    spec = {**spec, "params": {"n": [1]}, "fixed": {"mode": "quick"}}
    with pytest.raises(SpecError, match=r"key 'fixed\.mode', value 'quick'"):
        load_spec(write_spec(tmp_path / "p.yml", spec))
    spec["fixed"] = {"mode": "slow"}
    assert load_spec(write_spec(tmp_path / "p.yml", spec)).fixed == {"mode": "slow"}


def test_a_linear_role_typo_is_refused_at_load(tmp_path):
    spec = {"name": "r", "op": "linear", "params": {"role": ["qkvv"], "b": [1], "l": [8],
                                                    "dim": [8]}}
    with pytest.raises(SpecError, match=r"key 'params\.role', value 'qkvv'"):
        load_spec(write_spec(tmp_path / "r.yml", spec))


@pytest.mark.parametrize(("op", "params", "bad"), [
    ("adam_step", {"n_params": [1000], "stage": ["frist"]}, "frist"),
    ("adam_step", {"n_params": [1000], "layout": ["ETT"]}, "ETT"),
    ("flash_attention", {"b": [1], "h": [2], "l": [8], "dim": [16], "impl": ["flash"]},
     "flash")])
def test_a_value_outside_a_catalog_ops_choices_is_refused(tmp_path, op, params, bad):
    """A typo in a fixed-set parameter was silently the default (stage: frist -> middle)."""
    spec = {"name": "c", "op": op, "params": params}
    with pytest.raises(SpecError, match=f"value '{bad}'"):
        load_spec(write_spec(tmp_path / "c.yml", spec))


GELU = {"name": "g8", "op": "gelu", "params": {"b": [1], "l": [8], "dim": [8],
                                               "dtype": ["fp8", "fp32"]}, "repeats": 1}


def test_a_dtype_the_backend_cannot_run_is_refused_before_a_store_is_written(capsys, tmp_path):
    spec = write_spec(tmp_path / "g8.yml", GELU)
    store = tmp_path / "s.duckdb"
    code, _, err = cli_in_process(capsys, "run", str(spec), "--store", str(store))
    one_error(code, err, f"In file {spec}, key 'params.dtype', value 'fp8': backend 'cpu' "
                         f"cannot run this dtype (it runs fp64, fp32, fp16, bf16)",
              "--where \"dtype != 'fp8'\"")
    assert not store.exists()
    with Store(tmp_path / "api.duckdb") as st, pytest.raises(SpecError, match="'fp8'"):
        run_spec(spec_from_mapping(GELU), st, RunConfig(interactive=False))
    with Store(tmp_path / "api.duckdb", read_only=True) as st:
        assert st.count() == 0


def test_a_selection_without_the_dtype_runs(tmp_path):
    spec = spec_from_mapping(GELU)
    check_backend_dtypes(spec, "cpu", where="dtype == 'fp32'")  # no error
    check_backend_dtypes(SweepSpec.model_validate({**GELU, "dtype": "fp8", "params": {
        "b": [1], "l": [8], "dim": [8], "dtype": ["fp32"]}}), "cpu")  # the axis wins
    with pytest.raises(SpecError, match="key 'dtype', value 'int8'"):
        check_backend_dtypes(spec_from_mapping({**GELU, "dtype": "int8", "params": {
            "b": [1], "l": [8], "dim": [8]}}), "cpu")


def test_import_results_help_names_every_format_it_reads():
    from opatlas.cli.results_cmd import import_results

    text = inspect.signature(import_results).parameters["path"].default.help
    assert all(s in text for s in (".parquet", ".csv", ".json"))


def test_a_users_op_runs_dtypes_of_its_own(tmp_path):
    """The backend's dtypes bind the catalog's ops (built from its tensors); an --ops-module
    op handling fp8 itself is not refused, a catalog op in fp8 is."""
    from opatlas.ops import load_ops_module
    from opatlas.run.runner import check_backend_dtypes

    module = tmp_path / "picky.py"
    module.write_text(OPS_WITH_CHOICES)
    load_ops_module(module)
    mine = {"name": "p", "op": "picky_review_r1",
            "params": {"n": [1], "mode": ["fast"], "dtype": ["fp8"]}}
    check_backend_dtypes(load_spec(write_spec(tmp_path / "p.yml", mine)), "cpu")
    with pytest.raises(SpecError, match="backend 'cpu' cannot run this dtype"):
        check_backend_dtypes(load_spec(write_spec(tmp_path / "g.yml", GELU)), "cpu")
