"""Review of Fig. 24a: impossible or malformed measured points are errors naming the file,
line, column and value; the figure is log-log with coinciding points kept apart; the table
has one short GPU name per row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from opatlas.bounds import figures, plots
from opatlas.bounds.frontier import frontier
from opatlas.bounds.gpu_data import measured_points, seed_points, short_gpu_name, versus_bound
from opatlas.bounds.problems import FIGURES
from opatlas.errors import SpecError

N = 4096
L2_H100 = 50 * 2**20
BOUND_FP32_50MIB = 4 * N * N * 4  # 268,435,456 B (see test_fig24a_measured.py)
HEADER = "gpu,l2_bytes,kernel,dtype,dram_bytes,ns,kernel_names,how\n"
GOOD = "NVIDIA H100 80GB HBM3,52428800,simt,fp32,393986560,1,k,cuBLAS\n"


@pytest.fixture(scope="module")
def bound():
    return frontier(FIGURES["fig24a"]()[0])


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.csv"
    p.write_text(text)
    return p


def _error(path: Path, bound=None) -> str:
    """The one-line message of reading ``path`` (and, with ``bound``, comparing it)."""
    with pytest.raises(SpecError) as err:
        points = measured_points(path)
        if bound is not None:
            versus_bound(pd.concat([seed_points(), points], ignore_index=True), bound)
    msg = str(err.value)
    assert str(path) in msg and "\n" not in msg
    return msg


# -- 1. a point below the bound at its L2 size ------------------------------------------------

def test_dram_bytes_below_the_compulsory_traffic_is_named(tmp_path, bound):
    p = _write(tmp_path, HEADER + GOOD + "NVIDIA H100 80GB HBM3,52428800,simt,fp32,12,1,k,x\n")
    msg = _error(p, bound)
    assert "line 3" in msg and "key 'dram_bytes'" in msg and "value 12:" in msg
    assert "268,435,456" in msg and "201,326,592" in msg  # the bound there, the compulsory
    assert "MiB" in msg and "below the bound" in msg


def test_an_l2_too_small_for_the_traffic_is_named(tmp_path, bound):
    """393,986,560 B is above the compulsory 201,326,592 B, so the L2 of 100 B is the slip."""
    p = _write(tmp_path, HEADER + "H100,100,simt,fp32,393986560,1,k,x\n")
    msg = _error(p, bound)
    assert "line 2" in msg and "key 'l2_bytes'" in msg and "value 100:" in msg
    assert "below the bound" in msg and "MiB" in msg


def test_an_l2_below_the_smallest_buffer_names_the_file_and_line(tmp_path, bound):
    p = _write(tmp_path, HEADER + GOOD + "H100,4,simt,fp32,393986560,1,k,x\n")
    msg = _error(p, bound)
    assert "line 3" in msg and "key 'l2_bytes'" in msg and "value 4:" in msg
    assert "smallest buffer (3 words)" in msg


def test_a_point_exactly_at_the_bound_is_kept_with_ratio_one(tmp_path, bound):
    p = _write(tmp_path, HEADER + f"H100,{L2_H100},simt,fp32,{BOUND_FP32_50MIB},1,k,x\n")
    (row,) = versus_bound(measured_points(p), bound).to_dict("records")
    assert row["bound_bytes"] == BOUND_FP32_50MIB and row["ratio"] == 1.0


def test_the_seed_points_are_all_at_or_above_the_bound(bound):
    table = versus_bound(seed_points(), bound)
    assert len(table) == 8 and (table["ratio"] >= 1).all()


# -- 2. whole numbers in a sane range ---------------------------------------------------------

@pytest.mark.parametrize("col,bad,row,why", [
    ("l2_bytes", "1e30", "H100,1e30,simt,fp32,393986560,1,k,x", "not below 2**53"),
    ("l2_bytes", "52428800.9", "H100,52428800.9,simt,fp32,393986560,1,k,x", "whole number"),
    ("dram_bytes", str(2**53), f"H100,52428800,simt,fp32,{2**53},1,k,x", "not below 2**53"),
    ("dram_bytes", "inf", "H100,52428800,simt,fp32,inf,1,k,x", "not a positive number"),
    ("dram_bytes", "nan", "H100,52428800,simt,fp32,nan,1,k,x", "not a positive number"),
])
def test_byte_counts_must_be_whole_and_below_2_53(tmp_path, col, bad, row, why):
    msg = _error(_write(tmp_path, HEADER + GOOD + row + "\n"))
    assert "line 3" in msg and f"key '{col}'" in msg and f"value {bad!r}" in msg and why in msg


def test_whole_numbers_with_separators_read_exactly(tmp_path):
    p = _write(tmp_path, HEADER + 'H100,"52,428,800",simt,fp32,393_986_560,1,k,x\n'
                                  f"H100,5.24288e7,tf32,fp32,{2**53 - 1},1,k,x\n")
    m = measured_points(p)
    assert list(m["l2_bytes"]) == [L2_H100, L2_H100]
    assert list(m["dram_bytes"]) == [393_986_560, 2**53 - 1]  # exact, no float rounding
    assert m["l2_bytes"].dtype == np.int64 and m["dram_bytes"].dtype == np.int64


# -- 3. malformed rows ------------------------------------------------------------------------

def test_a_row_with_an_extra_field_is_named_by_its_field_count(tmp_path):
    msg = _error(_write(tmp_path, HEADER + GOOD + GOOD.rstrip("\n") + ",extra\n"))
    assert "line 3 has 9 fields, the header has 8" in msg


def test_a_short_row_is_named_too(tmp_path):
    msg = _error(_write(tmp_path, HEADER + "H100,52428800,simt\n"))
    assert "line 2 has 3 fields, the header has 8" in msg


def test_a_repeated_header_is_refused(tmp_path):
    p = _write(tmp_path, "gpu,l2_bytes,kernel,dtype,dram_bytes,how,how\n"
                         "H100,52428800,simt,fp32,393986560,x,y\n")
    msg = _error(p)
    assert "key 'how'" in msg and "appears 2 times" in msg and "line 1" in msg


@pytest.mark.parametrize("col,row", [
    ("how", "H100,52428800,simt,fp32,393986560,1,k,"),
    ("gpu", "  ,52428800,simt,fp32,393986560,1,k,x"),
    ("kernel", "H100,52428800,,fp32,393986560,1,k,x"),
])
def test_an_empty_required_text_field_is_refused(tmp_path, col, row):
    msg = _error(_write(tmp_path, HEADER + GOOD + row + "\n"))
    assert "line 3" in msg and f"key '{col}'" in msg and f"empty {col}" in msg


def test_lines_are_counted_as_in_the_file_past_blank_lines(tmp_path):
    msg = _error(_write(tmp_path, HEADER + GOOD + "\n" + "H100,52428800,simt,fp32,-5,1,k,x\n"))
    assert "line 4" in msg and "key 'dram_bytes'" in msg


def test_each_measured_row_carries_its_file_and_line(tmp_path):
    p = _write(tmp_path, HEADER + GOOD + "\n" + GOOD)
    m = measured_points(p)
    assert list(m["line"]) == [2, 4] and set(m["file"]) == {str(p)}


# -- 4. the figure ----------------------------------------------------------------------------

@pytest.fixture
def drawn(monkeypatch, tmp_path, bound):
    """Fig. 24a's axes, captured where the figure would be saved."""
    seen = {}

    def keep(fig, path):
        seen["ax"] = fig.axes[0]
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    figures.fig24a(tmp_path, bound)
    return seen["ax"]


def test_fig24a_is_log_log_with_bytes_on_both_axes(drawn):
    assert drawn.get_xscale() == "log" and drawn.get_yscale() == "log"
    assert "(bytes)" in drawn.get_xlabel() and "(bytes)" in drawn.get_ylabel()
    lo, hi = drawn.get_ylim()
    assert lo <= 100_663_296 and hi >= 2.69 * 2**30  # the bf16 bound's floor, the A2 seed


def test_fig24a_markers_do_not_cover_each_other(drawn):
    """Every GPU point at least 8 px from every other, the seed's H100 simt (the middle of
    the three within 1% of each other) at the true 50 MiB and the spread within ±11%."""
    points = np.vstack([c.get_offsets() for c in drawn.collections if len(c.get_offsets())])
    assert len(points) == 11
    px = drawn.transData.transform(points)
    gaps = np.linalg.norm(px[:, None, :] - px[None, :, :], axis=-1)
    assert gaps[~np.eye(len(px), dtype=bool)].min() >= 8
    near_h100 = points[np.abs(np.log(points[:, 0] / L2_H100)) < 0.2]
    assert len(near_h100) == 5 and np.abs(np.log(near_h100[:, 0] / L2_H100)).max() <= 0.1 + 1e-9
    seed_simt = points[np.isclose(points[:, 1], 373.39 * 2**20)]
    assert seed_simt[0, 0] == pytest.approx(L2_H100)


def test_side_by_side_spreads_only_points_that_coincide():
    data = pd.DataFrame({"l2_bytes": [50, 50, 50, 50, 50, 2],
                         "dram_bytes": [391.5, 391.4, 394.0, 346.7, 176.1, 391.5],
                         "label": ["seed simt", "seed tensor", "ours simt", "tf32", "bf16",
                                   "seed simt"]})
    # sorted by bytes: 391.4 (tensor) < 391.5 (simt) < 394 (ours) within 8% of each other
    assert list(plots._side_by_side(data)) == [0.0, -1.0, 1.0, 0.0, 0.0, 0.0]


def test_other_figures_keep_their_default_axes(monkeypatch, tmp_path, bound):
    seen = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: seen.setdefault("ax",
                                                                                fig.axes[0]))
    plots.plot_frontiers([bound], tmp_path / "x.png", logy=False)
    ax = seen["ax"]
    assert ax.get_xlabel() == "Buffer Size (B)" and ax.get_ylabel() == "Backing Store Accesses (B)"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    assert [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"] == []  # no L2 marks


# -- 5. the table's GPU names -----------------------------------------------------------------

def test_the_table_has_short_gpu_names_and_the_full_device(tmp_path, bound):
    _, csv_path = figures.fig24a(tmp_path, bound)
    table = pd.read_csv(csv_path)
    assert set(table["gpu"]) == {"A2", "A30", "A100", "H100"}
    ours = table[table["source"] == "measured"]
    assert set(ours["gpu"]) == {"H100"} and set(ours["device"]) == {"NVIDIA H100 80GB HBM3"}
    assert (table.loc[table["source"] == "seed", "gpu"]
            == table.loc[table["source"] == "seed", "device"]).all()


@pytest.mark.parametrize("name,short", [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA H100 PCIe", "H100"), ("NVIDIA A2", "A2"), ("A30", "A30"),
    ("NVIDIA RTX A2000", "RTX A2000"), ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
])
def test_short_gpu_names(name, short):
    assert short_gpu_name(name) == short
