"""``opatlas fit`` and ``opatlas predict`` on bad op data: a sample CSV missing a column its op
needs, one holding no rows, and a user's op (no counts) on a device outside the catalog are
refused in one line saying what is wrong, cold and warm, instead of a fallback model or a
"no FLOP or byte counts" error."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, cli_in_process, one_error

BUNDLED = REPO / "src" / "opatlas" / "data" / "ett-a100" / "operator"
LINEAR1 = BUNDLED / "NVIDIAA100-SXM4-80GB_linear1_fp16.csv"
SHAPE = ("--shape", "mp=1,b=2,l=1024,dim=4096")
NEEDS = "which op 'linear1' (catalog op 'linear') needs: its parameters are b, l, dim"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Indexes and models of this test's own: nothing cached elsewhere answers for it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _without(column: str, dest: Path) -> Path:
    """A copy of the bundled linear1 samples at ``dest`` without ``column``."""
    with LINEAR1.open(newline="") as f:
        rows = list(csv.reader(f))
    at = rows[0].index(column)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", newline="") as f:
        csv.writer(f).writerows(r[:at] + r[at + 1:] for r in rows)
    return dest


def test_a_csv_missing_a_column_is_refused_by_fit_naming_file_column_and_params(
        tmp_path, capsys):
    bad = _without("dim", tmp_path / "d" / LINEAR1.name)
    for data in (bad.parent, bad):
        code, _, err = cli_in_process(capsys, "fit", "--data", str(data), "--no-baseline")
        one_error(code, err, str(bad), "no column dim", NEEDS)
        assert "FLOPs and bytes could not be counted" not in err


def test_predict_refuses_it_cold_and_warm(tmp_path, capsys):
    bad = _without("dim", tmp_path / "d" / LINEAR1.name)
    for _ in range(2):  # the second call finds no index cached from the first
        code, out, err = cli_in_process(capsys, "predict", "linear1", "--data",
                                        str(bad.parent), *SHAPE)
        one_error(code, err, str(bad), "no column dim", NEEDS)
        assert out == ""


def test_on_a_device_outside_the_catalog_the_missing_column_is_the_cause(tmp_path, capsys):
    bad = _without("dim", tmp_path / "d" / "MyGPU_linear1_fp16.csv")
    code, _, err = cli_in_process(capsys, "predict", "linear1", "--data", str(bad.parent),
                                  *SHAPE)
    line = one_error(code, err, str(bad), "no column dim", NEEDS)
    assert "no FLOP or byte counts" not in line


def test_an_optional_column_left_out_is_no_error(tmp_path):
    """``mp`` has a catalog default: a file without it still loads."""
    from opatlas.fit.data import load_op_data

    df = load_op_data(_without("mp", tmp_path / "d" / LINEAR1.name).parent)
    params = [json.loads(t) for t in df["params_json"]]
    assert set(df["op"]) == {"linear1"} and len(df) > 100
    assert all("dim" in p and "mp" not in p for p in params)


def test_importing_such_a_csv_is_refused_before_the_store_is_written(tmp_path, capsys):
    bad = _without("dim", tmp_path / "d" / LINEAR1.name)
    store = tmp_path / "s.duckdb"
    code, _, err = cli_in_process(capsys, "import", "ett-samples", str(bad.parent),
                                  "--store", str(store))
    one_error(code, err, f"{bad}: no column dim, which op 'linear1'", NEEDS)


def _header_only(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(LINEAR1.read_text().splitlines()[0] + "\n")
    return dest


def test_a_header_only_csv_is_refused_naming_it(tmp_path, capsys):
    empty = _header_only(tmp_path / "d" / "MyGPU_linear1_fp16.csv")
    for data in (empty, empty.parent):
        code, _, err = cli_in_process(capsys, "fit", "--data", str(data))
        one_error(code, err, f"{empty}: holds no rows, only its header (mp, b, l, dim")
        assert "no estimate-train-time sample CSVs" not in err


def test_a_header_only_csv_beside_good_ones_is_not_skipped_silently(tmp_path, capsys):
    empty = _header_only(tmp_path / "d" / "MyGPU_linear2_fp16.csv")
    (empty.parent / "MyGPU_linear1_fp16.csv").write_text(LINEAR1.read_text())
    code, _, err = cli_in_process(capsys, "predict", "linear1", "--data", str(empty.parent),
                                  *SHAPE)
    one_error(code, err, str(empty), "holds no rows")


def test_a_csv_without_any_time_is_refused_saying_so(tmp_path, capsys):
    path = tmp_path / "MyGPU_linear1_fp16.csv"
    path.write_text("mp,b,l,dim,F_dur(us),B_dur(us)\n1,2,1024,4096,,\n1,2,2048,4096,,\n")
    code, _, err = cli_in_process(capsys, "fit", "--data", str(path))
    one_error(code, err, f"{path}: holds no timed rows", "2 row(s) leaves F_dur(us), B_dur(us)")


def _own_op_csv(folder: Path) -> Path:
    """Samples of an op outside the catalog on a device outside it: no counts at all."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "MyGPU_myscale_fp16.csv"
    rows = "".join(f"{n},{n / 100:.3f},{n / 50:.3f}\n" for n in range(1000, 13000, 1000))
    path.write_text("n,F_dur(us),B_dur(us)\n" + rows)
    return path


@pytest.mark.parametrize("command", [("fit", "--no-baseline"),
                                     ("predict", "myscale", "--shape", "n=4096")])
def test_an_own_op_without_its_module_is_named_with_the_option(tmp_path, capsys, command):
    folder = _own_op_csv(tmp_path / "d").parent
    code, _, err = cli_in_process(capsys, command[0], "--data", str(folder), *command[1:])
    one_error(code, err, "op 'myscale' is not in the op catalog",
              "pass the module that registers it with --ops-module FILE")


def test_an_own_op_in_a_store_without_its_module_is_named_too(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    folder = _own_op_csv(tmp_path / "d").parent
    code, _, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                  str(store))
    assert code == 0, err
    code, _, err = cli_in_process(capsys, "predict", "myscale", "--data", str(store),
                                  "--shape", "n=4096")
    one_error(code, err, "op 'myscale' is not in the op catalog", "--ops-module FILE")


def test_data_device_still_says_no_counts_for_catalog_ops():
    """Rows of catalog ops whose counts all fail keep the plain cause (no op to name)."""
    from opatlas.errors import OpatlasError
    from opatlas.fit.data import data_device

    rows = pd.DataFrame({"op": ["linear1"], "pass": ["fwd"], "device": ["MyGPU"],
                         "dtype": ["fp16"], "params_json": ['{"b": 1}'], "y_us": [1.0]})
    with pytest.raises(OpatlasError) as info:
        data_device(rows, "MyGPU", "fp16")
    assert str(info.value).endswith("no FLOP or byte counts to derive a roofline from")


def test_a_slow_devices_roofline_is_said_in_its_own_units():
    """A CPU's 10.8 GFLOP/s was said as '0.0 TFLOP/s', read as no compute at all."""
    from opatlas.fit.catalog import unknown_device_note

    note = unknown_device_note("AMD EPYC", 1.08e10, 9.5e10, "fp32", 702)
    assert "(10.80 GFLOP/s fp32, 95.00 GB/s, best of 702 samples)" in note
