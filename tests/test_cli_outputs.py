"""Outputs on standard output: a command whose reader goes away (``opatlas ... | head -1``) ends
with exit 0 and nothing on stderr, whether it writes through ``typer.echo`` (click's own EPIPE
handling would exit 1) or through rich; and every table option takes ``-`` for standard output."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from opatlas.tables import write_table


@pytest.mark.parametrize("args", [["sweep", "list"],
                                  ["sweep", "expand", "examples/specs/linear.yml", "--json"],
                                  ["bound", "gemm", "64", "64", "64"]],
                         ids=["sweep-list", "expand-json", "bound-table"])
def test_a_closed_pipe_ends_with_success(args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "opatlas", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first write: it fails with EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err and "error" not in err, err


def test_a_table_to_dash_is_csv_on_standard_output(capfd, tmp_path):
    frame = pd.DataFrame({"op": ["gemm", "add"], "us": [1.5, 2.0]})
    write_table(frame, "-", "--csv")
    assert capfd.readouterr().out.splitlines() == ["op,us", "gemm,1.5", "add,2.0"]
    assert list(tmp_path.iterdir()) == []


def test_calibrate_report_csv_to_standard_output(capfd, tmp_path):
    """The CSV alone on stdout (its summary line goes to stderr); --report beside it is refused."""
    from opatlas.cli import main

    out = tmp_path / "p.json"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--groups", "10", "--report-csv", "-", "--out", str(out)])
    assert exc.value.code == 0
    got = capfd.readouterr()
    lines = got.out.splitlines()
    assert lines[0].startswith("in_grid,out_grid,in,out,hw_ns_per_tile")
    assert len(lines) > 1 and all(line.count(",") == lines[0].count(",") for line in lines)
    assert "test groups" in got.err and out.is_file()
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--groups", "10", "--report-csv", "-", "--report", "--out", str(out)])
    assert exc.value.code == 2
    assert "--report-csv - and --report" in capfd.readouterr().err


def test_an_empty_json_export_imports_as_no_rows(tmp_path, capsys):
    """An empty SLURM part exported as JSON is ``[]`` (no columns): it merges as 0 rows, as an
    empty CSV or Parquet export does."""
    from conftest import cli_in_process

    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    code, out, err = cli_in_process(capsys, "import", "results", str(empty), "--store",
                                    str(tmp_path / "m.duckdb"))
    assert code == 0, err
    assert "added 0 rows" in out + err
