"""Defects a new user met: each bad input is one line and exit code 2, nothing is written by a
command that fails, and what a command assumes or writes is said."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, cli_in_process, one_error, run_cli, write_spec
from opatlas.errors import OpatlasError
from opatlas.predict import Predictor
from opatlas.predict.predictor import parse_shape
from opatlas.spec import load_spec
from opatlas.store import ResultRow, Store
from opatlas.sweep import expand

LINEAR = REPO / "examples" / "specs" / "linear.yml"
SHAPE = ["--shape", "mp=2", "--shape", "b=4", "--shape", "l=4096", "--shape", "dim=4096"]


def _linear_spec(path: Path, dims: list[int]) -> Path:
    return write_spec(path, {"op": "linear", "params": {
        "role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": dims}})


def _linear_store(path: Path) -> Path:
    """A store holding two linear results (no reshard ones)."""
    with Store(path) as st:
        st.add_results([ResultRow(vector_id=c * 56, op="linear", params_json='{"b": 1}',
                                  pass_="fwd", backend="cpu", device="d", dtype="fp32",
                                  status="ok", message="", versions_json="{}", mean_ns=1e3)
                        for c in "ab"])
    return path


# 1 ------------------------------------------------------------------------------------------
def test_a_binary_file_given_as_a_spec_is_one_line(tmp_path, capsys):
    binary = tmp_path / "some.parquet"
    binary.write_bytes(b"PAR1\x15\x04\x15\xd0\xff\xfe" + bytes(range(256)))
    store = tmp_path / "x.duckdb"
    for args in (["sweep", "expand", str(binary)], ["run", str(binary), "--store", str(store)]):
        one_error(*cli_in_process(capsys, *args)[::2], f"In file {binary}",
                  "not a text (YAML) file")
    assert not store.exists()


# 2 ------------------------------------------------------------------------------------------
def test_export_tt_needs_a_reshard_spec(tmp_path, capsys):
    outdir = tmp_path / "vectors_export"
    one_error(*cli_in_process(capsys, "sweep", "export-tt", str(LINEAR), str(outdir))[::2],
              "needs a reshard spec", "op is 'linear'")
    assert not outdir.exists()
    from opatlas.tenstorrent.ttjson import export_tt

    vectors = expand(load_spec(_linear_spec(tmp_path / "s.yml", [512]))).vectors
    with pytest.raises(OpatlasError, match="op is 'linear'"):
        export_tt(vectors, outdir)
    assert not outdir.exists()


# 3 ------------------------------------------------------------------------------------------
def test_fit_reshard_on_a_store_without_reshard_results_names_its_ops(tmp_path, capsys):
    store = _linear_store(tmp_path / "s.duckdb")
    one_error(*cli_in_process(capsys, "fit", "--data", str(store), "--recipe", "reshard")[::2],
              "--recipe reshard", str(store), "no ok reshard results", "ops: linear")
    empty = tmp_path / "e.csv"
    empty.write_text("in_grid,out_grid,group,tiles,y\n")
    one_error(*cli_in_process(capsys, "fit", "--data", str(empty), "--recipe", "reshard")[::2],
              str(empty), "no rows")


# 4 ------------------------------------------------------------------------------------------
def test_a_bad_ops_module_is_one_line(tmp_path, capsys):
    spec = str(_linear_spec(tmp_path / "s.yml", [512]))
    one_error(*cli_in_process(capsys, "sweep", "expand", spec, "--ops-module",
                              "nosuchmodule")[::2], "--ops-module nosuchmodule",
              "no such module")
    bad = tmp_path / "bad_ops.py"
    bad.write_text("import math\n\ndef f(:\n    pass\n")
    one_error(*cli_in_process(capsys, "sweep", "expand", spec, "--ops-module", str(bad))[::2],
              f"--ops-module {bad}", "syntax error", f"{bad}, line 3")
    broken = tmp_path / "broken_ops.py"
    broken.write_text("x = 1\nimport nosuchdependency\n")
    one_error(*cli_in_process(capsys, "sweep", "expand", spec, "--ops-module",
                              str(broken))[::2], f"{broken}, line 2",
              "No module named 'nosuchdependency'")
    broken.write_text("x = 1\n")  # fixed: imported again, not taken as loaded
    code, out, err = cli_in_process(capsys, "sweep", "expand", spec, "--ops-module", str(broken))
    assert code == 0 and "1 vector, 1 valid" in out, err


# 5 ------------------------------------------------------------------------------------------
def test_out_dev_stdout_writes_into_a_pipe(tmp_path):
    store = _linear_store(tmp_path / "s.duckdb")
    proc = run_cli("results", "--store", str(store), "--format", "csv", "--out", "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("vector_id,op,") and len(lines) == 3
    assert sorted(ln.split(",")[0] for ln in lines[1:]) == ["a" * 56, "b" * 56]
    assert "wrote 2 rows to /dev/stdout" in proc.stderr  # said, but not into the data


# 6 ------------------------------------------------------------------------------------------
def _no_measuring(monkeypatch) -> None:
    def measure(*args, **kwargs):
        raise AssertionError("measured before its inputs were checked")

    monkeypatch.setattr("opatlas.ops.collectives.run_collective", measure)


def test_collectives_checks_its_store_and_sizes_before_measuring(tmp_path, capsys, monkeypatch):
    _no_measuring(monkeypatch)
    not_a_store = tmp_path / "a.yml"
    not_a_store.write_text("op: linear\n")
    one_error(*cli_in_process(capsys, "collectives", "all_reduce", "--store",
                              str(not_a_store))[::2], str(not_a_store), "not a DuckDB file")
    assert not_a_store.read_text() == "op: linear\n"
    for sizes in ("", " , "):
        one_error(*cli_in_process(capsys, "collectives", "all_reduce", "--sizes", sizes)[::2],
                  f"--sizes {sizes!r}", "no size given")


# 7 ------------------------------------------------------------------------------------------
def test_predict_linear_without_a_role_uses_the_default_role(capsys):
    code, out, err = cli_in_process(capsys, "predict", "linear", *SHAPE, "--json")
    assert code == 0, err
    assert "no role given; using its default role=qkv" in err
    default = json.loads(out)
    code, out, err = cli_in_process(capsys, "predict", "linear", *SHAPE, "--shape", "role=qkv",
                                    "--json")
    assert code == 0 and "role" not in err, err
    qkv = json.loads(out)
    assert default["shape"] == qkv["shape"] and default["shape"]["role"] == "qkv"
    assert default["us"] == qkv["us"] and qkv["us"]["fwd"] > 0
    pred = Predictor()
    shape = {"mp": 2, "b": 4, "l": 4096, "dim": 4096}
    with pytest.warns(UserWarning, match="no role given; predicting its default role 'qkv'"):
        fwd = pred.predict("linear", shape)
    assert fwd[0] == pytest.approx(qkv["us"]["fwd"])
    assert fwd[0] == pred.predict("linear", {**shape, "role": "qkv"})[0]


# 8 ------------------------------------------------------------------------------------------
def test_predict_refuses_a_fractional_integer_parameter(capsys):
    one_error(*cli_in_process(capsys, "predict", "linear", "--shape", "role=qkv", *SHAPE[:4],
                              "--shape", "l=4096.9", "--shape", "dim=4096")[::2],
              "l=4096.9", "l takes a whole number", "4096.9")
    with pytest.raises(OpatlasError, match="mp takes a whole number"):
        parse_shape("linear", ["mp=1.5"])
    assert parse_shape("linear", ["l=4096.0", "dim=512"]) == {"l": 4096, "dim": 512}
    assert parse_shape("attention_dropout", ["p=0.25", "b=2"]) == {"p": 0.25, "b": 2}


# 9 ------------------------------------------------------------------------------------------
def test_fit_out_takes_what_its_help_says(tmp_path, capsys):
    store = _linear_store(tmp_path / "s.duckdb")
    for recipe in ("hybrid", "reshard"):
        one_error(*cli_in_process(capsys, "fit", "--data", str(store), "--recipe", recipe,
                                  "--out", str(tmp_path / "mm.json"))[::2],
                  f"--out {tmp_path / 'mm.json'}", "unknown extension '.json'")
    assert not (tmp_path / "mm.json").exists()
    a_file = tmp_path / "models"
    a_file.write_text("mine")
    one_error(*cli_in_process(capsys, "fit", "--data", str(store), "--out", str(a_file))[::2],
              "is a file, not a folder")
    metrics = tmp_path / "m.csv"
    code, out, err = cli_in_process(capsys, "fit", "--op", "gelu", "--no-baseline", "--out",
                                    str(metrics))
    assert code == 0, err
    written = pd.read_csv(metrics)
    assert sorted(written["pass"]) == ["bwd", "fwd"] and set(written["op"]) == {"gelu"}
    assert f"wrote the metrics of 2 (op, pass) pairs to {metrics}" in out


# 10 -----------------------------------------------------------------------------------------
def test_a_value_listed_twice_in_a_spec_is_refused(tmp_path, capsys):
    spec = _linear_spec(tmp_path / "s.yml", [512, 1024, 512])
    store = tmp_path / "s.duckdb"
    for args in (["sweep", "expand", str(spec)], ["run", str(spec), "--store", str(store)]):
        one_error(*cli_in_process(capsys, *args)[::2], f"In file {spec}", "key 'params.dim'",
                  "value 512", "more than once")
    assert not store.exists()
    code, out, err = cli_in_process(capsys, "sweep", "expand",
                                    str(_linear_spec(tmp_path / "t.yml", [512, 1024])))
    assert code == 0 and "2 vectors, 2 valid" in out, err


# 11 -----------------------------------------------------------------------------------------
def test_results_out_with_an_unknown_extension_is_refused(tmp_path, capsys):
    store = _linear_store(tmp_path / "s.duckdb")
    one_error(*cli_in_process(capsys, "results", "--store", str(store), "--out",
                              str(tmp_path / "r.xlsx"))[::2],
              f"--out {tmp_path / 'r.xlsx'}", "unknown extension '.xlsx'", ".csv, .json")
    assert not (tmp_path / "r.xlsx").exists()
    text = tmp_path / "r.txt"
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--out", str(text))
    assert code == 0, err
    assert f"wrote a table of 2 rows to {text}" in out and "2 result rows" in text.read_text()


def test_one_vector_is_said_in_the_singular(capsys, tmp_path):
    spec = REPO / "examples" / "specs" / "linear.yml"
    code, out, err = cli_in_process(capsys, "sweep", "expand", str(spec), "--where",
                                    "dim == 512 and mp == 1 and b == 1 and l == 128 and "
                                    "role == 'qkv'", "--out", str(tmp_path / "v.json"))
    assert code == 0 and "linear (linear): 1 vector, 1 valid" in out, err
    assert f"wrote 1 vector to {tmp_path / 'v.json'}" in out


def test_a_negative_size_and_link_peak_are_refused_with_the_true_bound(capsys):
    args = ["--shape", "b=1", "--shape", "l=128", "--shape", "dim=64"]
    one_error(*cli_in_process(capsys, "predict", "linear", "--shape", "mp=-2", *args)[::2],
              "mp must be a finite number > 0 (a size or a split)")
    one_error(*cli_in_process(capsys, "collectives", "all_reduce", "--link-peak-gbps",
                              "-1")[::2], "--link-peak-gbps")


def test_results_op_finds_rows_filed_under_an_estimate_train_time_name(capsys, tmp_path):
    from opatlas.store import ResultRow, Store

    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.add_results([ResultRow(f"v{i}", op, "{}", "fwd", "cpu", "X", "fp32", "ok",
                                  repeats=1, median_ns=1.0)
                        for i, op in enumerate(["flash_atten", "flash_atten", "linear1",
                                                "linear2"])])
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--op",
                                    "flash_attention", "--format", "csv")
    assert code == 0 and "note: --op flash_attention: the store files it as 'flash_atten'" in err
    assert out.count("flash_atten,") == 2
    # linear is both linear1 and linear2 here: the rows of both, said on stderr
    code, out, err = cli_in_process(capsys, "results", "--store", str(store), "--op", "linear",
                                    "--format", "csv")
    assert code == 0 and "its aliases linear1, linear2; reading the rows of all of them" in err
    assert out.count("linear1,") == 1 and out.count("linear2,") == 1 and "flash" not in out


def test_a_constraint_or_suite_key_naming_no_parameter_names_its_key(capsys, tmp_path):
    params = {"role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": [512]}
    for extra, key, said in (({"constraints": ["dimm > 3"]}, "constraints",
                              "'dimm > 3' names unknown parameters ['dimm'] (the spec's are "
                              "b, dim, dtype, l, mp, role)"),
                             ({"suite_by": ["dimm"]}, "suite_by",
                              "names 'dimm', which is not a parameter")):
        spec = write_spec(tmp_path / f"{key}.yml", {"op": "linear", "params": params, **extra})
        code, _, err = cli_in_process(capsys, "sweep", "expand", str(spec))
        line = one_error(code, err, f"key '{key}'", said)
        assert "'params'" not in line  # not the whole spec echoed as the value


def _commands(cmd, path=("opatlas",)):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_every_option_and_argument_of_every_command_has_help():
    import typer

    from opatlas.cli import _command

    missing = [(" ".join(path), p.name) for path, cmd in _commands(_command())
               for p in cmd.get_params(typer.Context(cmd)) if not getattr(p, "help", None)]
    assert missing == []


def test_a_flag_is_not_labelled_as_taking_a_value(capsys):
    """Typer labels a flag ``<bool>`` as if it took one; a value-taking option keeps its label."""
    code, out, _ = cli_in_process(capsys, "estimate", "--help")
    assert code == 0 and "<bool>" not in out
    assert "<path>" in out and "--json" in out


def test_a_shape_may_be_comma_separated_and_names_a_parameter_given_twice():
    assert parse_shape("linear1", ["mp=2,b=4", "l=4096, dim=512"]) == {
        "mp": 2, "b": 4, "l": 4096, "dim": 512}
    with pytest.raises(OpatlasError, match="b is given twice"):
        parse_shape("linear1", ["b=4", "mp=1,b=8"])


def test_a_spec_with_no_valid_vector_is_refused_before_any_store(tmp_path, capsys):
    spec = write_spec(tmp_path / "none.yml", {
        "name": "none", "op": "linear", "constraints": ["dim > 100000"],
        "params": {"role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": [64]}})
    store = tmp_path / "s.duckdb"
    one_error(*cli_in_process(capsys, "run", str(spec), "--store", str(store))[::2],
              "the spec has no valid vector of none", "violates: dim > 100000")
    assert not store.exists()


@pytest.mark.parametrize(("args", "needle"), [
    (("--address", "10.0.0.1:6379", "--chunk", "3"), "--address, --chunk are for --executor ray"),
    (("--executor", "ray", "--jobs", "9"), "--jobs is for --executor submitit"),
])
def test_an_option_of_another_executor_is_refused(tmp_path, capsys, args, needle):
    spec = _linear_spec(tmp_path / "l.yml", [64])
    store = tmp_path / "s.duckdb"
    one_error(*cli_in_process(capsys, "run", str(spec), "--store", str(store), *args)[::2],
              needle)
    assert not store.exists()


@pytest.mark.parametrize("command", [["estimate", "llama2-7b"], ["bound", "gemm", "8", "8", "8"],
                                     ["bound", "fusion", "16", "16", "16", "16"]])
def test_every_plot_under_a_file_names_the_file(capsys, tmp_path, command):
    """``--plot notes.txt/fig.png`` cannot be made: every command's check says which file."""
    (tmp_path / "notes.txt").write_text("x")
    bad = tmp_path / "notes.txt" / "fig.png"
    one_error(*cli_in_process(capsys, *command, "--plot", str(bad))[::2],
              f"{tmp_path / 'notes.txt'} is a file, not a folder")
    assert not bad.exists()
