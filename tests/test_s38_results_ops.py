"""Session 38: a user op's parameter named like a results column survives every export;
``import ett-samples --ops-module``; ``--ops-module NAME`` for a module in the current
directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import cli_in_process, one_error, write_spec
from opatlas.ops import registry
from opatlas.store import Store

# an op whose parameters status, median_ns, backend and op are named like results columns
KNOB = '''
from opatlas.ops import Op, register_op

@register_op
class Knob(Op):
    name = "s38knob"
    params = ("n", "status", "median_ns", "backend", "op")
    def flops(self, p): return {"fwd": float(p["n"])}
    def min_bytes(self, p): return {"fwd": 4.0 * p["n"]}
'''
KNOB_CSV = ("n,status,median_ns,backend,op,F_dur(us)\n"
            "16,warm,7,tri,x,1.5\n"
            "32,cold,9,tri,y,3.0\n")

# an op with a default (k = 2): FLOPs fwd n*k, bwd n; bytes fwd 8n, bwd 12n
SCALE = '''
from opatlas.ops import Op, register_op

@register_op
class Scale(Op):
    name = "s38scale"
    params = ("n",)
    defaults = {"k": 2}
    def flops(self, p): return {"fwd": float(p["n"] * p["k"]), "bwd": float(p["n"])}
    def min_bytes(self, p): return {"fwd": 8.0 * p["n"], "bwd": 12.0 * p["n"]}
'''
SCALE_CSV = "n,F_dur(us),B_dur(us)\n16,1.5,2.5\n32,3.0,4.0\n"


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch):
    """Each test's user ops registered in a copy of the catalog, and its user modules
    forgotten after: another test sees the op catalog as it was."""
    registry._load_builtins()
    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith((registry.USER_MODULE, "s38")):
            del sys.modules[name]


def _samples(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder


def _rows(store: Path) -> pd.DataFrame:
    """The store's results, ordered, without the import time."""
    with Store(store, read_only=True) as st:
        df = st.table("results").drop(columns=["created_at"])
    return df.sort_values(["vector_id", "pass"], ignore_index=True)


# -- 1. a parameter named like a results column ------------------------------------------------

def _user_op_store(tmp_path: Path, module: str, sample: str, text: str) -> Path:
    """A store of the samples ``text`` (file ``sample``) of the user op in ``module``."""
    from opatlas.store.ett import import_ett_samples

    mod = tmp_path / "user_ops.py"
    mod.write_text(module)
    registry.load_ops_module(mod)
    store = tmp_path / "user.duckdb"
    with Store(store) as st:
        import_ett_samples(st, _samples(tmp_path / "samples", sample, text))
    return store


@pytest.fixture
def knob_store(tmp_path: Path) -> Path:
    return _user_op_store(tmp_path, KNOB, "A100_s38knob_fp16.csv", KNOB_CSV)


READERS = {"csv": pd.read_csv, "parquet": pd.read_parquet,
           "json": lambda p: pd.DataFrame(json.loads(Path(p).read_text()))}


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_a_param_named_like_a_results_column_keeps_its_values(knob_store, tmp_path, capsys,
                                                              fmt):
    out = tmp_path / f"r.{fmt}"
    code, _, err = cli_in_process(capsys, "results", "--store", str(knob_store), "--out",
                                  str(out))
    assert code == 0, err
    note = ("opatlas: note: op 's38knob': parameter(s) status, median_ns, backend, op named "
            "like results columns, written as param.status, param.median_ns, param.backend, "
            "param.op")
    assert note in err
    df = READERS[fmt](out).sort_values("n", ignore_index=True)
    # the measured columns keep the measured values ...
    assert df["status"].tolist() == ["ok", "ok"]
    assert df["median_ns"].tolist() == [1500.0, 3000.0]
    assert df["backend"].tolist() == ["ett-import", "ett-import"]
    assert df["op"].tolist() == ["s38knob", "s38knob"]
    # ... and the parameters are all there, under a prefixed name
    assert df["n"].tolist() == [16, 32]
    assert df["param.status"].tolist() == ["warm", "cold"]
    assert df["param.median_ns"].tolist() == [7, 9]
    assert df["param.backend"].tolist() == ["tri", "tri"]
    assert df["param.op"].tolist() == ["x", "y"]
    assert list(df.columns[-5:]) == ["n", "param.status", "param.median_ns",
                                     "param.backend", "param.op"]
    assert json.loads(df["params_json"][0]) == {"n": 16, "status": "warm", "median_ns": 7,
                                                "backend": "tri", "op": "x", "dtype": "fp16"}


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_such_an_export_round_trips_through_another_store(knob_store, tmp_path, capsys, fmt):
    out = tmp_path / f"r.{fmt}"
    assert cli_in_process(capsys, "results", "--store", str(knob_store), "--out", str(out))[0] == 0
    again = tmp_path / "again.duckdb"
    code, stdout, err = cli_in_process(capsys, "import", "results", str(out), "--store",
                                       str(again))
    assert code == 0, err
    assert stdout.startswith(f"added 2 rows to {again}")
    pd.testing.assert_frame_equal(_rows(again), _rows(knob_store))


def test_dtype_is_no_clash_and_plain_params_are_unchanged(tmp_path, capsys):
    """A result's dtype is its vector's dtype parameter: no param.dtype column, no note."""
    store = _user_op_store(tmp_path, SCALE, "A100_s38scale_fp16.csv", SCALE_CSV)
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--format", "csv")
    assert code == 0 and "note" not in err, err
    header = out.splitlines()[0].split(",")
    assert header[-1] == "n" and not any(c.startswith("param.") for c in header)


# -- 2. import ett-samples --ops-module ---------------------------------------------------------

def test_import_ett_samples_of_a_user_op_with_its_module(tmp_path, capsys):
    mod = tmp_path / "scale_ops.py"
    mod.write_text(SCALE)
    folder = _samples(tmp_path / "samples", "A100_s38scale_fp16.csv", SCALE_CSV)
    store = tmp_path / "s.duckdb"
    code, out, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                    str(store), "--ops-module", str(mod))
    assert code == 0 and "not in the op catalog" not in err, err
    assert out.strip() == f"added 4 rows from 1 files to {store}"
    df = _rows(store).sort_values(["median_ns"], ignore_index=True)
    # the module's counts, its default k = 2 filled in: fwd n*k, bwd n; bytes 8n, 12n
    assert df["pass"].tolist() == ["fwd", "bwd", "fwd", "bwd"]
    assert df["median_ns"].tolist() == [1500.0, 2500.0, 3000.0, 4000.0]
    assert df["flops"].tolist() == [32.0, 16.0, 64.0, 32.0]
    assert df["min_bytes"].tolist() == [128.0, 192.0, 256.0, 384.0]


def test_import_ett_samples_checks_a_user_ops_parameters_with_its_module(tmp_path, capsys):
    mod = tmp_path / "scale_ops.py"
    mod.write_text(SCALE)
    bad = "m,F_dur(us)\n16,1.5\n"  # no n, which s38scale needs
    folder = _samples(tmp_path / "samples", "A100_s38scale_fp16.csv", bad)
    store = tmp_path / "s.duckdb"
    code, _, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                  str(store), "--ops-module", str(mod))
    one_error(code, err, "A100_s38scale_fp16.csv: no column n, which op 's38scale' needs")
    assert not store.exists() or _rows(store).empty


def test_import_ett_samples_of_a_user_op_without_its_module_says_so(tmp_path, capsys):
    folder = _samples(tmp_path / "samples", "A100_s38scale_fp16.csv", SCALE_CSV)
    store = tmp_path / "s.duckdb"
    code, out, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                    str(store))
    assert code == 0 and "Traceback" not in err, err
    assert out.strip() == f"added 4 rows from 1 files to {store}"
    notes = [ln for ln in err.splitlines() if "not in the op catalog" in ln]
    assert notes == [
        "opatlas: note: op 's38scale' (A100_s38scale_fp16.csv) is not in the op catalog: its "
        "rows are stored with the parameters the file gives, unchecked, and without FLOP or "
        "byte counts; if it is your own op, pass the module that registers it with "
        "--ops-module FILE"]
    assert _rows(store)["flops"].isna().all()


def test_import_ett_samples_of_catalog_ops_says_nothing_of_the_catalog(tmp_path, capsys):
    folder = _samples(tmp_path / "samples", "A100_gelu_fp16.csv",
                      "b,l,dim,mp,F_dur(us),B_dur(us)\n1,128,1024,1,5.0,6.0\n")
    code, _, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                  str(tmp_path / "s.duckdb"))
    assert code == 0 and "op catalog" not in err, err


# -- 3. --ops-module NAME from the current directory --------------------------------------------

def test_a_module_name_is_found_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "s38cwdops.py").write_text(SCALE)
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    assert registry.load_ops_module("s38cwdops") is True
    assert registry.get_op("s38scale")[0].defaults == {"k": 2}
    assert sys.path == path_before  # the current directory was on it only while importing


def test_a_missing_module_is_one_line_naming_what_was_tried(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(registry.OpatlasError) as info:
        registry.load_ops_module("s38_no_such_ops")
    assert str(info.value) == (
        f"--ops-module s38_no_such_ops: no such module on the Python path nor in the current "
        f"directory ({tmp_path}), nor a file of that name; give a .py file or an importable "
        f"module")


def test_a_failing_module_in_the_current_directory_names_its_line(tmp_path, monkeypatch):
    (tmp_path / "s38broken.py").write_text("x = 1\nraise ValueError('bad knob')\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(registry.OpatlasError) as info:
        registry.load_ops_module("s38broken")
    assert str(info.value) == (f"--ops-module s38broken: importing it failed (at "
                               f"{tmp_path / 's38broken.py'}, line 2): ValueError: bad knob")


def test_the_console_script_finds_a_module_in_the_current_directory(tmp_path):
    """The ``opatlas`` script (not ``python -m``, which puts the directory on the path)."""
    script = Path(sys.executable).parent / "opatlas"
    if not script.exists():
        pytest.skip("no opatlas console script next to this interpreter")
    (tmp_path / "myops.py").write_text(SCALE)
    write_spec(tmp_path / "s.yml", {"op": "s38scale", "params": {"n": [16, 32]},
                                    "dtype": "fp32"})
    proc = subprocess.run([str(script), "sweep", "expand", "s.yml", "--ops-module", "myops",
                           "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"valid": 2' in proc.stdout
