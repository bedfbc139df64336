"""Review s36 of tt-metal profiles in `opatlas analyze`: a MATH FIDELITY tt-perf-report does
not know is an error naming the row, not its traceback; a gzip file cut short or not gzip at
all, and a CSV cut short mid-row, are errors naming the file; the chip a CSV without DEVICE
ARCH is rated against is said (refused under --strict) and --device names it; cells neither
tt-perf-report nor opatlas can use (DEVICE ID, CORE COUNT, tensor dimensions, durations) are
said with their line, column and value, and refused under --strict."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")

from conftest import cli_in_process, one_error
from opatlas.analyze.sources import ReadOptions, read
from opatlas.errors import OpatlasError

REAL = Path(__file__).parent / "data" / "tenstorrent" / "ops_perf_results_2025_09_18_11_39_20.csv"
MATMUL_LINE = 187  # the file's first Matmul (CSV line; tt-perf-report's ID)
WHOLE = ("--ignore-signposts", "--json")


def _lines() -> list[list[str]]:
    with open(REAL, newline="") as fh:
        return list(csv.reader(fh))


def edited(tmp_path: Path, edits: dict[tuple[int, str], str], name: str = "edited") -> Path:
    """REAL with cells replaced: (CSV line, column) -> the text written there."""
    lines = _lines()
    header = lines[0]
    for (line, column), value in edits.items():
        lines[line - 1][header.index(column)] = value
    path = tmp_path / f"ops_perf_results_{name}.csv"
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(lines)
    return path


def notes_of(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("opatlas: note")]


# ---------------------------------------------------------------- 2. an unknown fidelity

def test_a_math_fidelity_tt_perf_report_does_not_know_is_one_error_naming_the_row(
        tmp_path, capsys):
    assert _lines()[MATMUL_LINE - 1][0] == "Matmul"
    path = edited(tmp_path, {(MATMUL_LINE, "MATH FIDELITY"): "HiFi9"})
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE)
    one_error(code, err, str(path), f"line {MATMUL_LINE}", "Matmul", "MATH FIDELITY",
              "'HiFi9'", "HiFi4")


def test_a_blank_text_cell_tt_perf_report_reads_is_one_error_naming_the_row(tmp_path, capsys):
    path = edited(tmp_path, {(MATMUL_LINE, "INPUT_1_MEMORY"): ""})
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE)
    one_error(code, err, str(path), f"line {MATMUL_LINE}", "INPUT_1_MEMORY is blank")


# ---------------------------------------------------------------- 3. compressed CSVs

def test_a_truncated_gzip_is_one_error_not_an_interruption(tmp_path, capsys):
    whole = gzip.compress(REAL.read_bytes())
    for name in ("ops_perf_results_cut.csv.gz", "t.csv.gz"):  # named, or found by its header
        path = tmp_path / name
        path.write_bytes(whole[:20000])
        code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE)
        one_error(code, err, str(path), "truncated gzip")
        assert "interrupted" not in err


def test_a_plain_csv_named_gz_and_a_gzip_named_csv_are_said(tmp_path, capsys):
    for name in ("ops_perf_results_plain.csv.gz", "plain.csv.gz"):
        path = tmp_path / name
        path.write_bytes(REAL.read_bytes())
        code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE)
        one_error(code, err, str(path), "not a gzip file", "name it .csv")
    path = tmp_path / "ops_perf_results_gz.csv"
    path.write_bytes(gzip.compress(REAL.read_bytes()))
    code, _, err = cli_in_process(capsys, "analyze", str(path), "--kind", "ttmetal", *WHOLE)
    one_error(code, err, str(path), "a gzip file", "name it .csv.gz")


def test_a_corrupt_gzip_is_said_and_a_good_one_reads_as_the_csv(tmp_path, capsys):
    data = bytearray(gzip.compress(REAL.read_bytes()))
    good = tmp_path / "ops_perf_results_good.csv.gz"
    good.write_bytes(bytes(data))
    data[5000] ^= 0xFF
    bad = tmp_path / "ops_perf_results_bad.csv.gz"
    bad.write_bytes(bytes(data))
    code, _, err = cli_in_process(capsys, "analyze", str(bad), *WHOLE)
    one_error(code, err, str(bad))
    code, out, _ = cli_in_process(capsys, "analyze", str(good), *WHOLE)
    assert code == 0 and len(json.loads(out)["rows"]) == 621


# ---------------------------------------------------------------- 4. a CSV cut short

def test_a_csv_cut_short_mid_row_names_the_line_and_its_fields(tmp_path, capsys):
    path = tmp_path / "trunc.csv"
    path.write_bytes(REAL.read_bytes()[:50000])
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE)
    one_error(code, err, str(path), "line 36", "72 of the header's 91 fields", "cut short")
    # the same cut inside a gzip file
    gz = tmp_path / "trunc.csv.gz"
    gz.write_bytes(gzip.compress(REAL.read_bytes()[:50000]))
    code, _, err = cli_in_process(capsys, "analyze", str(gz), *WHOLE)
    one_error(code, err, str(gz), "line 36", "72 of the header's 91 fields")


def test_a_row_with_fields_missing_mid_file_is_named(tmp_path, capsys):
    lines = REAL.read_text().splitlines(keepends=True)
    lines[9] = ",".join(lines[9].split(",")[:40]) + "\n"  # CSV line 10: 40 fields
    path = tmp_path / "ops_perf_results_short.csv"
    path.write_text("".join(lines))
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE)
    one_error(code, err, "line 10", "40 of the header's 91 fields", "fields missing")


def test_trailing_empty_fields_and_blank_lines_are_not_short_rows(tmp_path):
    path = tmp_path / "ops_perf_results_blank.csv"
    path.write_text(REAL.read_text() + "\n\n")
    a = read(path, options=ReadOptions(extra={"ignore_signposts": True, "device": "wormhole"},
                                       strict=True))
    assert len(a.rows) == 621


# ---------------------------------------------------------------- 6. the chip

def test_the_chip_assumed_for_a_csv_without_device_arch_is_said_and_strict_refuses(capsys):
    code, out, err = cli_in_process(capsys, "analyze", str(REAL), *WHOLE)
    assert code == 0
    said = [n for n in notes_of(err) if "does not say which chip" in n]
    assert len(said) == 1 and "no DEVICE ARCH column" in said[0] and "wormhole" in said[0]
    assert "--device" in said[0] and "blackhole" in said[0]
    assert any("does not say which chip" in n for n in json.loads(out)["summary"]["notes"])
    code, _, err = cli_in_process(capsys, "analyze", str(REAL), *WHOLE, "--strict")
    one_error(code, err, str(REAL), "does not say which chip", "--strict", "--device")


@pytest.mark.parametrize("given, arch, cores, dram", [
    ("wormhole_b0", "wormhole", 64, 288e9), ("WORMHOLE", "wormhole", 64, 288e9),
    ("blackhole", "blackhole", 110, 512e9), ("Blackhole", "blackhole", 110, 512e9)])
def test_device_names_the_chip_of_a_tt_metal_csv_in_any_case(capsys, given, arch, cores, dram):
    code, out, err = cli_in_process(capsys, "analyze", str(REAL), *WHOLE, "--strict",
                                    "--device", given)
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert (summary["arch"], summary["worker_cores"], summary["peak_bytes_s"]) == (
        arch, cores, dram)
    assert not any("which chip" in n or "ignored" in n for n in notes_of(err)), err


def test_blackhole_peaks_change_the_bounds(capsys):
    worm = read(REAL, options=ReadOptions(extra={"ignore_signposts": True, "device": "wormhole"}))
    black = read(REAL, options=ReadOptions(extra={"ignore_signposts": True,
                                                  "device": "blackhole"}))
    w, b = (a.rows.set_index("id").loc[8] for a in (worm, black))  # a DRAM-traffic bound
    assert b["opatlas_bound_ns"] == pytest.approx(w["opatlas_bound_ns"] * 288 / 512)


def test_an_unknown_device_is_one_error_naming_the_chips(capsys):
    code, _, err = cli_in_process(capsys, "analyze", str(REAL), *WHOLE, "--device", "H100")
    one_error(code, err, "--device H100", "wormhole", "blackhole")


def test_a_csv_that_names_its_chip_needs_no_device_and_device_overrides_it(tmp_path, capsys):
    lines = _lines()
    for i, row in enumerate(lines):
        row.append("DEVICE ARCH" if i == 0 else ("" if row[1] == "signpost" else "blackhole"))
    path = tmp_path / "ops_perf_results_arch.csv"
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(lines)
    code, out, err = cli_in_process(capsys, "analyze", str(path), *WHOLE, "--strict")
    assert code == 0, err
    assert json.loads(out)["summary"]["arch"] == "blackhole"
    assert not any("which chip" in n or "recorded on" in n for n in notes_of(err))
    code, out, err = cli_in_process(capsys, "analyze", str(path), *WHOLE, "--device",
                                    "wormhole")
    assert code == 0 and json.loads(out)["summary"]["arch"] == "wormhole"
    assert any("recorded on blackhole" in n and "--device wormhole" in n for n in notes_of(err))


# ---------------------------------------------------------------- 7. cells it cannot use

@pytest.mark.parametrize("column, value, said, shown", [
    ("CORE COUNT", "xx", "a CORE COUNT that is not a positive whole number",
     "CORE COUNT 'xx'"),
    ("INPUT_0_Y_PAD[LOGICAL]", "-7680[7680]", "a tensor dimension",
     "INPUT_0_Y_PAD[LOGICAL] '-7680[7680]'"),
    ("INPUT_0_Y_PAD[LOGICAL]", "7680[0]", "a tensor dimension",
     "INPUT_0_Y_PAD[LOGICAL] '7680[0]'"),
    ("DEVICE ID", "abc", "a DEVICE ID", "DEVICE ID 'abc'"),
    ("OP TO OP LATENCY [ns]", "soon", "an OP TO OP LATENCY [ns]",
     "OP TO OP LATENCY [ns] 'soon'")])
def test_a_cell_it_cannot_use_is_said_with_line_column_and_value_and_strict_refuses(
        tmp_path, capsys, column, value, said, shown):
    path = edited(tmp_path, {(MATMUL_LINE, column): value})
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE, "--device", "wormhole")
    assert code == 0, err
    cells = [n for n in notes_of(err) if said in n]
    assert len(cells) == 1 and f"line {MATMUL_LINE}: {shown}" in cells[0], err
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE, "--device", "wormhole",
                                  "--strict")
    one_error(code, err, str(path), f"line {MATMUL_LINE}", shown, "--strict refuses")


@pytest.mark.parametrize("value, shown", [("abc", "'abc'"), ("-1", "-1"), ("1.5", "1.5")])
def test_a_bad_device_id_is_said_beside_the_host_group_it_makes(tmp_path, value, shown):
    # not a device of its own (-1, 1.5 were, with their row in no group)
    path = edited(tmp_path, {(MATMUL_LINE, "DEVICE ID"): value})
    a = read(path, options=ReadOptions(extra={"ignore_signposts": True, "device": "wormhole"}))
    assert a.groups() == [0, "host"] and a.summary["devices"] == [0]
    assert len(a.rows) == 621 and (a.rows["group"] == "host").sum() == 1
    assert any(f"DEVICE ID {shown}" in n and "'host'" in n for n in a.summary["notes"])


def test_many_bad_cells_name_a_few_then_count_the_rest(tmp_path, capsys):
    ops = [i + 1 for i, row in enumerate(_lines()) if i and row[1] != "signpost"][:7]
    path = edited(tmp_path, {(line, "CORE COUNT"): "xx" for line in ops})
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE, "--device", "wormhole")
    assert code == 0, err
    note = next(n for n in notes_of(err) if "CORE COUNT" in n)
    assert "7 row(s)" in note and note.count("CORE COUNT 'xx'") == 3
    assert "4 more cell(s)" in note


def test_signposts_blank_cells_and_the_real_file_raise_no_cell_note(tmp_path, capsys):
    # a signpost's DEVICE ID is not read; the real file's cells are all usable
    path = edited(tmp_path, {(7, "DEVICE ID"): "abc"})
    assert _lines()[6][1] == "signpost"
    for p in (REAL, path):
        code, _, err = cli_in_process(capsys, "analyze", str(p), *WHOLE, "--device", "wormhole",
                                      "--strict")
        assert code == 0, err


def test_the_invalid_duration_note_names_each_value(tmp_path, capsys):
    lines = [i + 1 for i, row in enumerate(_lines()) if i and row[1] != "signpost"]
    path = edited(tmp_path, {(lines[0], "DEVICE KERNEL DURATION [ns]"): "abc",
                             (lines[1], "DEVICE KERNEL DURATION [ns]"): "-5000",
                             (lines[2], "DEVICE KERNEL DURATION [ns]"): ""})
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE, "--device", "wormhole")
    assert code == 0, err
    note = next(n for n in notes_of(err) if "DEVICE KERNEL DURATION" in n)
    assert "3 row(s)" in note
    for line, shown in zip(lines, ("'abc'", "-5000", "blank"), strict=False):
        assert f"{line} ({shown})" in note, note


def test_a_duration_contradicted_by_its_op_to_op_latency_names_both(tmp_path, capsys):
    line = [i + 1 for i, row in enumerate(_lines()) if i and row[1] != "signpost"][3]
    path = edited(tmp_path, {(line, "DEVICE KERNEL DURATION [ns]"): "1000",
                             (line, "OP TO OP LATENCY [ns]"): "-50000000"})
    code, _, err = cli_in_process(capsys, "analyze", str(path), *WHOLE, "--device", "wormhole")
    assert code == 0, err
    note = next(n for n in notes_of(err) if "DEVICE KERNEL DURATION" in n)
    assert f"{line} (1000, with OP TO OP LATENCY [ns] -50000000)" in note, note


def test_the_api_raises_opatlas_errors_for_each(tmp_path):
    path = edited(tmp_path, {(MATMUL_LINE, "MATH FIDELITY"): "HiFi9"})
    with pytest.raises(OpatlasError, match="MATH FIDELITY 'HiFi9'"):
        read(path, options=ReadOptions(extra={"ignore_signposts": True}))
    with pytest.raises(OpatlasError, match="not a chip tt-perf-report knows"):
        read(REAL, options=ReadOptions(extra={"ignore_signposts": True, "device": "grayskull"}))


def test_the_wormhole_simulator_predicts_no_reshard_of_another_chip():
    from types import SimpleNamespace

    from opatlas.analyze.sources.ttmetal import _sim_estimate
    from opatlas.tenstorrent import ttmetal as tm
    from test_analyze_ttmetal import RESHARD_ROW

    tpr = tm.perf_report_module()
    worm = SimpleNamespace(arch="wormhole_b0", csv_format=tpr.CsvFormat.V2)
    ns, why = _sim_estimate(tpr, worm, RESHARD_ROW)
    assert ns > 0 and why == "wormhole-sim"
    black = SimpleNamespace(arch="blackhole", csv_format=tpr.CsvFormat.V2)
    assert _sim_estimate(tpr, black, RESHARD_ROW) == (
        None, "not comparable: the simulator is calibrated on Wormhole, this profile is "
              "blackhole's")
