"""Review s35 of ``bound accel`` and ``analyze`` on a store: the accel plot is in bytes whatever
the word size; a swept level under other on-chip levels is bounded at the capacity they add
up to; a negative size is a bad size, not an unknown option; a store of collectives alone
analyses (a device outside the catalog is described by its kernels only)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import cli_in_process, one_error
from opatlas.analyze import api
from opatlas.bounds import gemm
from opatlas.bounds.accel_report import sweep_buffer_sizes
from opatlas.bounds.arch import load_arch
from opatlas.store import Store
from opatlas.store.db import ResultRow

SIMBA = load_arch("simba")
GEMM256 = gemm(256, 256, 256)
# the on-chip levels above Simba's WeightRegister: GlobalBuffer, Input-, Weight- and
# AccumulationBuffer (64 + 8 + 32 + 3 KB)
ABOVE_REGISTER = {"GlobalBuffer": 65536.0, "InputBuffer": 8192.0, "WeightBuffer": 32768.0,
                  "AccumulationBuffer": 3072.0}


def _simba16(tmp_path: Path) -> Path:
    """Simba with 16-bit words (its one-weight register made 2 bytes so that a mapping fits)."""
    doc = yaml.safe_load((resources.files("opatlas") / "data" / "arches" / "simba.yaml")
                         .read_text())
    doc["word_bits"] = 16
    next(lv for lv in doc["levels"] if lv["name"] == "WeightRegister")["size_bytes"] = 2
    path = tmp_path / "w16b.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _drawn(fig) -> tuple[np.ndarray, np.ndarray, list[tuple[float, float]]]:
    """The bound line's vertices (x, y) and every single scattered point."""
    ax = fig.axes[0]
    line = ax.lines[0]
    points = [tuple(map(float, c.get_offsets()[0])) for c in ax.collections
              if len(c.get_offsets()) == 1]
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float), points


def _bound_at(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """The line's value at ``at``, as the frontier's lookup (the last vertex at or left)."""
    return float(y[np.searchsorted(x, at, side="right") - 1])


# ------------------------------------------------------------------ 1: the plot is in bytes

def test_accel_plot_of_a_16_bit_arch_draws_the_table_bound_in_bytes(tmp_path, capsys, figures):
    code, out, err = cli_in_process(
        capsys, "bound", "accel", str(_simba16(tmp_path)), "--problem", "gemm", "256", "256",
        "256", "--mappings", "60", "--search-rounds", "0", "--buffer-sizes", "0.125",
        "--plot", str(tmp_path / "p.png"), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["word_bytes"] == 2
    (best,) = doc["best"]
    x, y, points = _drawn(figures[0])
    # the line where the table's bound is taken (128 B: 64 words) is that bound, in bytes
    assert _bound_at(x, y, best["capacity_bytes"]) == 2 * best["bound_at_capacity"]
    assert (best["best_dram_accesses"] < best["bound_at_capacity"]) == (
        2 * best["best_dram_accesses"] < _bound_at(x, y, best["capacity_bytes"]))
    # the stars: at the size and at the uniform tile, both in bytes
    assert (128.0, 2.0 * best["best_dram_accesses"]) in points
    assert (2.0 * best["best_tile_words"], 2.0 * best["best_dram_accesses"]) in points


def test_accel_plot_takes_the_word_size_from_the_points_by_default(tmp_path, figures):
    from opatlas.bounds.plots import plot_accel_sweep

    sweep = sweep_buffer_sizes(GEMM256, load_arch(str(_simba16(tmp_path))), sizes_bytes=[1024],
                               mappings=30)
    plot_accel_sweep(sweep.frontier, sweep.points, tmp_path / "p.png")  # as bound figures
    x, y, _ = _drawn(figures[0])
    f = sweep.frontier
    np.testing.assert_array_equal(x[:len(f.buffer)], 2.0 * f.buffer)
    np.testing.assert_array_equal(y[:len(f.buffer)], 2.0 * f.accesses)


# ------------------------------------------------------------ 2: the levels above the swept one

def test_a_swept_register_is_bounded_at_the_on_chip_capacity_above_it_too():
    sweep = sweep_buffer_sizes(GEMM256, SIMBA, level="WeightRegister", sizes_bytes=[1, 2],
                               mappings=100)
    assert sweep.above == ABOVE_REGISTER
    pts, extra = sweep.points, sum(ABOVE_REGISTER.values())
    np.testing.assert_array_equal(pts["bound_capacity_bytes"], pts["capacity_bytes"] + extra)
    np.testing.assert_array_equal(pts["bound_at_capacity"],
                                  sweep.frontier.lookup_many(pts["capacity_bytes"] + extra))
    # at the register's byte alone the bound was the smallest tile's (33.6 M words), which
    # nearly every mapping "beat" by reusing data from the 107 KB above the register
    assert sweep.frontier.lookup(2) is None
    assert (pts["dram_accesses"] < sweep.frontier.accesses[0]).mean() > 0.9
    assert not pts["below_bound_at_capacity"].any()
    best = sweep.best()
    assert list(best["bound_capacity_bytes"]) == [1 + extra, 2 + extra]


def test_the_global_buffer_sweep_keeps_the_artifacts_bound_at_its_own_size():
    sweep = sweep_buffer_sizes(GEMM256, SIMBA, sizes_bytes=[1024], mappings=30)
    assert sweep.above == {}
    pts = sweep.points
    np.testing.assert_array_equal(pts["bound_capacity_bytes"], pts["capacity_bytes"])
    assert (pts["bound_at_capacity"] == sweep.frontier.lookup(1024)).all()


def test_the_accel_table_says_what_the_bound_capacity_holds(capsys, figures, tmp_path):
    code, out, err = cli_in_process(
        capsys, "bound", "accel", "simba", "256", "256", "256", "--level", "InputBuffer",
        "--buffer-sizes", "0.125", "--mappings", "60", "--search-rounds", "0",
        "--plot", str(tmp_path / "p.png"))
    assert code == 0, err
    text = " ".join(out.split())
    assert "on chip (B)" in out and "65,664" in out  # 128 B + the 64 KB GlobalBuffer
    assert "that size + 65,536 B of GlobalBuffer, the on-chip levels between it and DRAM" in text
    ax = figures[0].axes[0]
    assert ax.get_xlabel() == "on chip: InputBuffer + the levels above it (B)"
    stars = [tuple(c.get_offsets()[0]) for c in ax.collections if len(c.get_offsets()) == 1]
    assert any(x == 65664.0 for x, _ in stars)  # the best stands at its bound's capacity


# ----------------------------------------------------------------- 3: negative sizes

@pytest.mark.parametrize(("args", "needle"), [
    (("gemm", "64", "-64", "64"), "not '-64' (K)"),
    (("gemm", "-8", "64", "64", "--json"), "not '-8' (M)"),
    (("gbmm", "64", "64", "-2"), "not '-2' (N)"),
    (("conv", "3", "3", "-16", "16", "64", "64"), "not '-16' (P)"),
    (("accel", "simba", "--problem", "gemm", "64", "-64", "64"), "not '-64' (K)"),
    (("accel", "simba", "8", "64", "64", "-1", "--problem=bmm"), "not '-1' (N)"),
])
def test_a_negative_size_is_a_bad_size_naming_it(capsys, args, needle):
    line = one_error(*cli_in_process(capsys, "bound", *args)[::2], needle)
    assert "sizes are whole numbers >= 1" in line and "No such option" not in line


def test_negative_option_values_and_unknown_options_keep_their_own_messages(capsys):
    one_error(*cli_in_process(capsys, "bound", "accel", "simba", "64", "64", "64", "--seed",
                              "-1")[::2], "'--seed'")
    one_error(*cli_in_process(capsys, "bound", "gbmm", "64", "64", "64", "-H", "-2")[::2],
              "'--heads'")
    one_error(*cli_in_process(capsys, "bound", "gemm", "64", "64", "64", "--jsn")[::2],
              "No such option: --jsn")


# ----------------------------------------------------------------- 4: a store of collectives

def _collectives(path: Path, device: str, kernel: bool = False) -> Path:
    """opatlas's own all-reduces as ``opatlas collectives --store`` records them (message
    bytes, no FLOPs), and with ``kernel`` one compute-bound GEMM."""
    rows = [ResultRow(f"v{i}", "collective.all_reduce", json.dumps(
        {"elements": n, "world_size": 2, "nodes": 1, "dtype": "fp32"}), "step", "gloo", device,
        "fp32", "ok", repeats=10, median_ns=2e5 + n, min_bytes=4.0 * n)
        for i, n in enumerate((1024, 65536))]
    if kernel:  # 2·512³ FLOPs over 3·512² fp32 words: 85 FLOP/B, no bandwidth evidence
        rows.append(ResultRow("k", "linear", json.dumps(
            {"role": "qkv", "b": 1, "l": 512, "dim": 512, "dtype": "fp32"}), "fwd", "cpu", device,
            "fp32", "ok", repeats=5, median_ns=1e6, flops=2.0 * 512**3,
            min_bytes=3 * 4.0 * 512**2))
    with Store(path) as st:
        st.add_results(rows)
    return path


def test_a_store_of_collectives_alone_on_an_unknown_device_analyses(tmp_path, capsys):
    path = _collectives(tmp_path / "ar.duckdb", "AMD EPYC")
    code, out, err = cli_in_process(capsys, "analyze", str(path), "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["limiter"] for r in rows] == ["communication"] * 2
    assert sorted(r["bytes"] for r in rows) == [4096.0, 262144.0]
    assert all(r["bound_time_s"] is None and r["time_s"] > 0 for r in rows)
    assert "opatlas: note: no link bandwidth known for device AMD EPYC" in err
    a = api.analyze(path)
    assert a.summary["peak_flops_s"] is None and "peaks" not in a.summary
    assert not any("empirical" in n for n in a.summary["notes"])


def test_an_unknown_devices_peaks_skip_its_collectives(tmp_path):
    """A collective's message bytes are no evidence of the memory bandwidth: the one kernel,
    at 85 FLOP/B, cannot show it, so the device has no memory roof."""
    a = api.analyze(_collectives(tmp_path / "mixed.duckdb", "AMD EPYC", kernel=True))
    assert a.summary["peak_bytes_s"] is None
    assert any("no memory roof" in n for n in a.summary["notes"])
    linear = a.rows[a.rows["op"] == "linear"].iloc[0]
    assert a.summary["peak_flops_s"] == pytest.approx(2.0 * 512**3 / 1e-3)
    assert linear["limiter"] == "compute"
    comm = a.rows[a.rows["op"] == "collective.all_reduce"]
    assert comm["limiter"].eq("communication").all()

