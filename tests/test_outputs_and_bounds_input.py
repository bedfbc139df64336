"""Output files and bound inputs a new user got wrong answers or tracebacks from: einsums with
repeated or empty operands, buffer sizes that are not sizes, table paths, the plot's units
under --word-bytes, grouped BMMs, spec dtypes, and output paths through links or into files."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from conftest import REPO, cli_in_process, one_error, refused
from opatlas.atomic import write_output
from opatlas.errors import OpatlasError


@pytest.mark.parametrize(("spec", "dims", "needle"), [
    ("mk,kn->mnn", "m=8,k=4,n=8", "repeats rank(s) n"),
    ("mm,mn->mn", "m=8,n=4", "repeats rank(s) m"),
    ("mk,,kn->mn", "m=8,k=4,n=8", "an operand is empty"),
    ("m k,kn->mn", "m=8,k=4,n=8", "space inside"),
])
def test_einsums_that_are_no_data_movement_problem_are_refused(capsys, spec, dims, needle):
    code, _, err = cli_in_process(capsys, "bound", "einsum", spec, "--dims", dims)
    one_error(code, err, repr(spec), needle)


@pytest.mark.parametrize("at", ["nan", "-5", "0", "inf"])
def test_at_must_be_a_buffer_size(capsys, at):
    code, out, err = cli_in_process(capsys, "bound", "gemm", "8", "8", "8", "--at", at, "--json")
    assert code == 2 and "not a buffer size" in err and out == ""


def test_at_on_a_gemm_is_the_hand_count(capsys):
    # an unbounded buffer reads A and B once and writes C once: 64·32 + 32·16 + 64·16 words
    code, out, _ = cli_in_process(capsys, "bound", "gemm", "64", "32", "16", "--at", "1e9",
                                  "--json")
    assert code == 0 and json.loads(out)["accesses"] == 64 * 32 + 32 * 16 + 64 * 16


def test_table_outputs_check_their_format_and_make_their_folder(capsys, tmp_path):
    code, _, err = cli_in_process(capsys, "bound", "gemm", "8", "8", "8", "--csv",
                                  str(tmp_path / "x.xlsx"))
    assert code == 2 and "unknown table format '.xlsx'" in err
    target = tmp_path / "new" / "deeper" / "f.csv"
    code, _, _ = cli_in_process(capsys, "bound", "gemm", "8", "8", "8", "--csv", str(target),
                                "--artifact-csv", str(tmp_path / "new" / "a" / "o.csv"))
    assert code == 0
    frame = pd.read_csv(target)
    assert frame["accesses"].min() == 3 * 64  # the GEMM's three 8×8 operands, once each
    code, _, err = cli_in_process(capsys, "bound", "figures", str(target))
    one_error(code, err, "is a file")


def test_the_plot_is_in_bytes_under_word_bytes(capsys, tmp_path):
    one, two = tmp_path / "w1.svg", tmp_path / "w2.svg"
    for path, wb in ((one, "1"), (two, "2")):
        code, _, err = cli_in_process(capsys, "bound", "gemm", "64", "64", "64", "--plot",
                                      str(path), "--word-bytes", wb)
        assert code == 0, err
    assert one.read_bytes() != two.read_bytes()  # the same words, twice the bytes


def test_grouped_bmm_checks_groups_and_takes_oi_over_the_true_compute(capsys):
    code, _, err = cli_in_process(capsys, "bound", "gbmm", "64", "64", "64", "--heads", "6",
                                  "--groups", "4")
    one_error(code, err, "6 heads do not split evenly into 4 groups")
    code, out, _ = cli_in_process(capsys, "bound", "gbmm", "4096", "128", "4096", "--heads",
                                  "32", "--groups", "4", "--at", "1e12", "--json")
    got = json.loads(out)
    # |Weights| + |Inputs| + |Outputs| = 4·128·4096 + 32·4096·128 + 32·4096·4096
    assert got["accesses"] == 555_745_280
    # OI as a GEMM's, over the true multiply-accumulates: 32 heads of 4096·128·4096, less
    # the outputs' first reads (2·MACs − |O|)
    ops = 2 * 32 * 4096 * 128 * 4096 - 32 * 4096 * 4096
    assert got["oi"] == pytest.approx(ops / 555_745_280)
    code, gb, _ = cli_in_process(capsys, "bound", "gbmm", "64", "32", "16", "--json")
    code, ge, _ = cli_in_process(capsys, "bound", "gemm", "64", "32", "16", "--json")
    assert [p["oi"] for p in json.loads(gb)["points"]] == \
        pytest.approx([p["oi"] for p in json.loads(ge)["points"]])  # H = G = 1 is a GEMM


@pytest.mark.parametrize(("args", "needle"), [
    (("bound", "conv"), "no convolution given"),
    (("bound", "fusion", "--layer", "4096,1024"), "is not M,K,N"),
    (("bound", "fusion", "--layer", "4096,0,8"), "every size must be >= 1"),
    (("bound", "accel", "simba", "--problem", "gemm", "64", "64", "64", "--buffer-sizes",
      "8,-1"), "every size must be a positive number"),
])
def test_bound_inputs_that_describe_nothing_are_one_line(capsys, args, needle):
    code, _, err = cli_in_process(capsys, *args)
    one_error(code, err, needle)


def test_a_spec_with_an_unknown_dtype_is_refused_before_anything_runs(tmp_path):
    from opatlas.spec import load_spec

    err = refused(load_spec, tmp_path / "bad.yml", "name: bad\nop: linear\nparams: {b: [1], "
                  "l: [8], dim: [16], dtype: [fp32, fp13]}\n", "unknown dtype")
    assert err.key == "params.dtype" and err.value == "fp13"


def test_outputs_write_through_links_and_name_a_file_in_the_way(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_output(link, lambda tmp: tmp.write_text("new"))
    assert link.is_symlink() and target.read_text() == "new"
    (tmp_path / "afile").write_text("")
    with pytest.raises(OpatlasError, match="afile is a file, not a folder"):
        write_output(tmp_path / "afile" / "x.csv", lambda tmp: tmp.write_text("x"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_an_output_to_a_fifo_is_written_in_place(tmp_path):
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    write_output(fifo, lambda path: path.write_text("through the pipe"))
    reader.join(timeout=10)
    assert got == ["through the pipe"] and not fifo.is_file()


def test_analyze_outputs_that_cannot_be_written_are_one_line(capsys, tmp_path):
    csv = REPO / "tests/data/tenstorrent/ops_perf_results_2025_09_18_11_39_20.csv"
    (tmp_path / "afile").write_text("")
    code, _, err = cli_in_process(capsys, "analyze", str(csv), "--html",
                                  str(tmp_path / "afile" / "r.html"))
    one_error(code, err, "--html", "is a file, not a folder")
    code, _, err = cli_in_process(capsys, "analyze", str(csv), "--csv", str(tmp_path))
    one_error(code, err, "--csv", "is a folder")


# --- runs and stores ------------------------------------------------------------------------

SPEC = REPO / "examples" / "specs"


def _fake_run(rows: int):
    """A run that records ``rows`` results, then is interrupted (Ctrl-C)."""
    from opatlas.store import ResultRow

    def run_spec(spec, st, cfg, **kw):
        st.add_results([ResultRow(f"v{i}", "linear", "{}", "fwd", "cpu", "X", "fp32", "ok",
                                  repeats=1, median_ns=1.0) for i in range(rows)])
        raise KeyboardInterrupt

    return run_spec


@pytest.mark.parametrize("rows", [0, 3])
def test_an_interrupted_run_says_what_it_kept(capsys, monkeypatch, tmp_path, rows):
    import opatlas.run

    monkeypatch.setattr(opatlas.run, "run_spec", _fake_run(rows))
    store = tmp_path / "s.duckdb"
    code, _, err = cli_in_process(capsys, "run", str(SPEC / "linear.yml"), "--store", str(store))
    assert code == 130
    assert (f"interrupted; {rows} result row(s) kept in {store}" if rows else
            f"interrupted; nothing was recorded and no store is left at {store}") in err
    assert store.exists() == bool(rows)  # a store this run made and left empty is removed
    assert ("run the same command again to resume" in err) == bool(rows)


def _raises(exc: BaseException):
    def fail(*args, **kwargs):
        raise exc
    return fail


def test_an_interrupted_command_exits_130_and_a_bug_keeps_its_own_traceback(capsys,
                                                                            monkeypatch):
    import opatlas.estimate.inputs

    monkeypatch.setattr(opatlas.estimate.inputs, "load_inputs", _raises(KeyboardInterrupt()))
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b")
    assert code == 130 and "Traceback" not in err  # typer's exit code for Ctrl-C
    # end of input at a prompt: click's Abort, said in one line
    monkeypatch.setattr(opatlas.estimate.inputs, "load_inputs", _raises(EOFError()))
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b")
    assert code == 130 and err.strip() == ("opatlas: interrupted; results recorded so far "
                                           "are kept")
    # an unexpected error is not swallowed nor replaced by one of the handler's own
    monkeypatch.setattr(opatlas.estimate.inputs, "load_inputs", _raises(ZeroDivisionError()))
    with pytest.raises(ZeroDivisionError):
        cli_in_process(capsys, "estimate", "llama2-7b")


def test_a_failed_run_keeps_a_store_that_existed(monkeypatch, tmp_path):
    from opatlas.store import Store
    from opatlas.store.writing import store_for_writing

    store = tmp_path / "kept.duckdb"
    with Store(store):
        pass
    with pytest.raises(RuntimeError), store_for_writing(store):
        raise RuntimeError("cluster unreachable")
    assert store.exists()
    with pytest.raises(RuntimeError), store_for_writing(tmp_path / "new.duckdb"):
        raise RuntimeError("cluster unreachable")
    assert not (tmp_path / "new.duckdb").exists()


def test_results_status_must_be_a_status(capsys, tmp_path):
    code, _, err = cli_in_process(capsys, "results", "--store", str(tmp_path / "x.duckdb"),
                                  "--status", "nosuch")
    one_error(code, err, "--status 'nosuch'", "ok, invalid, error")


def test_run_help_names_every_backends_options():
    from typer.testing import CliRunner

    from opatlas.cli import app

    text = " ".join(CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "cpu: threads=N" in text and "timing=events|profiler" in text and "params=FILE" in text


def test_predicting_a_value_never_measured_is_said_and_refused_under_strict(tmp_path):
    """A store measuring linear at roles qkv and ffn_up only, asked for role=vocab."""
    import warnings

    from opatlas.predict import Predictor
    from opatlas.predict.predictor import UnmeasuredValueWarning
    from opatlas.store import ResultRow, Store

    store = tmp_path / "lin.duckdb"
    rows = []
    for i, (role, b, l, dim) in enumerate((r, b, l, d) for r in ("qkv", "ffn_up")
                                          for b in (1, 2) for l in (64, 128, 256)
                                          for d in (128, 256, 512)):
        params = {"b": b, "l": l, "dim": dim, "role": role, "dtype": "fp32"}
        rows.append(ResultRow(f"v{i}", "linear", json.dumps(params), "fwd", "cpu", "MYCPU",
                              "fp32", "ok", repeats=3, median_ns=1e3 * b * l * dim / 64))
    with Store(store) as st:
        st.add_results(rows)
    shape = {"b": 1, "l": 64, "dim": 256}
    pred = Predictor(device="MYCPU", dtype="fp32", data=str(store), cache_dir=tmp_path / "c")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pred.predict("linear", {**shape, "role": "qkv"})
        assert not [w for w in caught if issubclass(w.category, UnmeasuredValueWarning)]
        pred.predict("linear", {**shape, "role": "vocab"})
    said = [str(w.message) for w in caught if issubclass(w.category, UnmeasuredValueWarning)]
    assert said == ["linear: role 'vocab' was never measured (the data has ffn_up, qkv): the "
                    "prediction extrapolates from the op's counts (--strict refuses)"]
    strict = Predictor(device="MYCPU", dtype="fp32", data=str(store), cache_dir=tmp_path / "c",
                       strict=True)
    with pytest.raises(OpatlasError, match="--strict refuses to extrapolate"):
        strict.predict("linear", {**shape, "role": "vocab"})
