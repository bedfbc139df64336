"""Fig. 24a with our own H100 measurement: reading it, the bound in each kernel's words, and
the measured-over-bound numbers (plot and CLI)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from opatlas.bounds import figures
from opatlas.bounds.frontier import frontier
from opatlas.bounds.gpu_data import measured_points, seed_points, versus_bound
from opatlas.bounds.plots import _series
from opatlas.bounds.problems import FIGURES
from opatlas.errors import SpecError

N = 4096
L2_H100 = 50 * 2**20  # 52,428,800 B, the measured device's L2
COMPULSORY_FP32 = 3 * N * N * 4  # read A and B, write C, once each: 201,326,592 B
# Keep half of A (2048×4096 words) on chip with a column of B and half a column of C: A and C
# move once, B twice, 4·4096² words; that tiling needs 8,394,752 words, which fit in 50 MiB of
# fp32 (13,107,200 words) while the next frontier point (A whole, 16,785,408 words) does not.
BOUND_FP32_50MIB = 4 * N * N * 4  # 268,435,456 B
# 50 MiB holds 26,214,400 bf16 words ≥ 16,785,408: every operand moves once, 2-byte words.
BOUND_BF16_50MIB = 3 * N * N * 2  # 100,663,296 B
MEASURED = {"simt": 393_986_560, "tf32": 346_656_000, "bf16": 176_106_752}
HEADER = "gpu,l2_bytes,kernel,dtype,dram_bytes,ns,kernel_names,how\n"


@pytest.fixture(scope="module")
def bound():
    return frontier(FIGURES["fig24a"]()[0])


def test_the_packaged_measurement_reads_with_its_extra_columns():
    m = measured_points()
    assert list(m["kernel"]) == ["simt", "tf32", "bf16"]
    assert dict(zip(m["kernel"], m["dram_bytes"], strict=True)) == MEASURED
    assert set(m["l2_bytes"]) == {L2_H100}
    assert list(m["word_bytes"]) == [4, 4, 2]
    assert set(m["source"]) == {"measured"}
    assert list(m["ns"]) == ["2645184", "333216", "169792"]  # kept, not in the way
    assert m["kernel_names"].iloc[2] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.csv"
    p.write_text(text)
    return p


def test_a_missing_column_is_named_with_the_file(tmp_path):
    p = _write(tmp_path, "gpu,l2_bytes,kernel,dtype,how\nH100,52428800,simt,fp32,x\n")
    with pytest.raises(SpecError) as err:
        measured_points(p)
    msg = str(err.value)
    assert str(p) in msg and "dram_bytes" in msg and "\n" not in msg


@pytest.mark.parametrize("col,bad,row", [
    ("dram_bytes", "-5", "H100,52428800,simt,fp32,-5,1,k,x"),
    ("dram_bytes", "lots", "H100,52428800,simt,fp32,lots,1,k,x"),
    ("l2_bytes", "0", "H100,0,simt,fp32,100,1,k,x"),
    ("l2_bytes", "", "H100,,simt,fp32,100,1,k,x"),
    ("dtype", "int8", "H100,52428800,simt,int8,100,1,k,x"),
])
def test_a_bad_value_is_named_with_file_key_value_and_line(tmp_path, col, bad, row):
    p = _write(tmp_path, HEADER + "H100,52428800,tf32,fp32,100,1,k,x\n" + row + "\n")
    with pytest.raises(SpecError) as err:
        measured_points(p)
    msg = str(err.value)
    assert str(p) in msg and f"key '{col}'" in msg and repr(bad) in msg and "line 3" in msg


def test_a_missing_given_file_is_an_error_not_an_empty_frame(tmp_path):
    with pytest.raises(SpecError) as err:
        measured_points(tmp_path / "m.csv")
    assert str(tmp_path / "m.csv") in str(err.value)


def test_measured_vs_bound_golden_values_and_invariants(bound):
    table = versus_bound(measured_points(), bound).set_index("kernel")
    assert table.loc["simt", "bound_bytes"] == BOUND_FP32_50MIB
    assert table.loc["tf32", "bound_bytes"] == BOUND_FP32_50MIB
    assert table.loc["bf16", "bound_bytes"] == BOUND_BF16_50MIB
    assert table.loc["bf16", "buffer_words"] == L2_H100 // 2 == 2 * table.loc["simt", "buffer_words"]
    assert table.loc["simt", "compulsory_bytes"] == COMPULSORY_FP32
    assert table.loc["bf16", "compulsory_bytes"] == COMPULSORY_FP32 // 2
    for k, v in MEASURED.items():
        assert table.loc[k, "ratio"] == pytest.approx(v / table.loc[k, "bound_bytes"], rel=1e-12)
    assert table.loc["simt", "ratio"] == pytest.approx(1.4677, abs=1e-4)
    assert table.loc["tf32", "ratio"] == pytest.approx(1.2914, abs=1e-4)
    assert table.loc["bf16", "ratio"] == pytest.approx(1.7495, abs=1e-4)


def test_no_kernel_beats_the_bound_and_the_bound_holds_the_compulsory_traffic(bound):
    """Physical invariant: compulsory ≤ bound ≤ measured, for the seed's points and ours."""
    table = versus_bound(pd.concat([seed_points(), measured_points()]), bound)
    assert len(table) == 11
    assert (table["compulsory_bytes"] <= table["bound_bytes"]).all()
    assert (table["bound_bytes"] <= table["dram_bytes"]).all()
    assert (table["ratio"] >= 1).all()


def test_the_bf16_point_is_not_held_to_the_fp32_bound(bound):
    """Measured fp32-word bound at 50 MiB (268 MB) is above the bf16 kernel's 176 MB: the
    comparison must use 2-byte words, where the kernel is above its own bound."""
    assert MEASURED["bf16"] < BOUND_FP32_50MIB
    row = versus_bound(measured_points(), bound).set_index("kernel").loc["bf16"]
    assert row["bound_bytes"] == 2 * bound.lookup(L2_H100 // 2) < MEASURED["bf16"]


def test_fig24a_plots_a_curve_per_word_size_that_agrees_with_the_table(tmp_path, monkeypatch,
                                                                          bound):
    seen = {}

    def fake_plot(frontiers, path, **kw):
        seen.update(kw, frontiers=frontiers)
        return path

    monkeypatch.setattr(figures, "plot_frontiers", fake_plot)
    paths = figures.fig24a(tmp_path, bound)
    assert [p.name for p in paths] == ["fig24a.png", "fig24a_vs_bound.csv"]
    assert seen["coefficients"] == [4, 2]
    assert "4 B" in seen["legends"][0] and "2 B" in seen["legends"][1]
    seeds = seen["gpu_data"].query("source == 'seed'")
    assert sorted(set(seeds["label"])) == ["A2–H100, Orojenesis seed (CUTLASS simt)",
                                           "A2–H100, Orojenesis seed (CUTLASS tensor)"]
    ours = seen["gpu_data"].query("source == 'measured'")
    assert list(ours["label"]) == ["H100, measured here (cuBLAS simt)",
                                   "H100, measured here (cuBLAS tf32)",
                                   "H100, measured here (cuBLAS bf16, 2-B words)"]
    assert set(ours["l2_bytes"]) == {L2_H100}
    # each curve, read as drawn (steps) at x = 50 MiB, is the bound the table holds it to
    table = pd.read_csv(paths[1]).set_index(["source", "kernel"])
    for coef, kernel in ((4, "simt"), (2, "bf16")):
        x, y = _series(bound, "accesses", None, coef)
        drawn = y[np.searchsorted(x, L2_H100, side="right") - 1]
        assert drawn == table.loc[("measured", kernel), "bound_bytes"]


def test_the_plot_is_written(tmp_path, bound):
    png, _ = figures.fig24a(tmp_path, bound)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bound_figures_prints_the_ratios(capsys, tmp_path, monkeypatch):
    from conftest import cli_in_process

    monkeypatch.setattr(figures, "make_figures", lambda outdir: [outdir / "fig24a.png"])
    code, out, err = cli_in_process(capsys, "bound", "figures", str(tmp_path / "figs"))
    assert code == 0, err
    ours = [ln for ln in out.splitlines() if ln.lstrip().startswith("measured")]
    assert len(ours) == 3
    assert "176,106,752 B measured" in ours[2] and "100,663,296 B" in ours[2]
    assert ours[0].endswith("ratio 1.468") and ours[1].endswith("ratio 1.291")
    assert ours[2].endswith("ratio 1.749")


def test_a_missing_packaged_file_is_said_on_stderr(monkeypatch, capsys):
    from opatlas.bounds import gpu_data

    monkeypatch.setattr(gpu_data, "packaged_measurements", lambda: None)
    m = gpu_data.measured_points()
    assert len(m) == 0 and {"l2_bytes", "dram_bytes", "word_bytes"} <= set(m.columns)
    assert "seed points only" in capsys.readouterr().err
