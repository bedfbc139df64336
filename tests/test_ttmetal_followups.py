"""tt-metal profiles in `opatlas analyze`, follow-ups: the ops that are neither matmuls, convs
nor reshards bounded by their least DRAM traffic (their DRAM tensors read or written once,
sized from the CSV's tensor columns), and the per-device util labelled for what it is."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("tt_perf_report", reason="tt-perf-report is the opatlas[tt] extra")

from opatlas.analyze import api
from opatlas.analyze.html import render
from opatlas.analyze.sources import ReadOptions, read
from opatlas.tenstorrent import ttmetal as tm

REAL = Path(__file__).parent / "data" / "tenstorrent" / "ops_perf_results_2025_09_18_11_39_20.csv"
WHOLE = ReadOptions(extra={"ignore_signposts": True})
BF16_TILE = 32 * 32 * 2


def _tensor(name: str, dims: tuple[str, str, str, str], layout: str, dtype: str,
            memory: str) -> dict[str, str]:
    """One operand's cells as a v2 CSV writes them (``padded[logical]``)."""
    cells = {f"{name}_{k}_PAD[LOGICAL]": v for k, v in zip("WZYX", dims, strict=True)}
    return {**cells, f"{name}_LAYOUT": layout, f"{name}_DATATYPE": dtype,
            f"{name}_MEMORY": memory}


def _traffic(row: dict[str, object]) -> tuple[tm.Traffic | None, str]:
    tpr = tm.perf_report_module()
    return tm.dram_traffic(row, tpr.CsvFormat.V2, tpr)


# ---------------------------------------------------------------- 1. bytes of a tensor

@pytest.mark.parametrize(("dims", "layout", "dtype", "expected"), [
    # bf16, TILE: 50 x 70 pads to 2 x 3 tiles of 32 x 32 x 2 B
    ((1, 1, 50, 70), "TILE", "BFLOAT16", 6 * BF16_TILE),
    # bfloat8_b: 1088 B a tile (1024 mantissas + 64 shared exponents), 1.0625 B an element
    ((1, 2, 64, 64), "TILE", "BFLOAT8_B", 8 * 1088),
    ((1, 1, 64, 64), "TILE", "DataType::BFLOAT8_B", int(64 * 64 * 1.0625)),
    ((1, 1, 1, 1), "TILE", "BFLOAT4_B", 576),
    ((2, 3, 5, 7), "TILE", "FLOAT32", 6 * 32 * 32 * 4),
    # ROW_MAJOR: no padding, the elements at their size
    ((1, 1, 3, 5), "ROW_MAJOR", "BFLOAT16", 30),
    ((1, 7, 25281, 6), "ROW_MAJOR", "BFLOAT16", 7 * 25281 * 6 * 2),
    ((1, 1, 3, 5), "ROW_MAJOR", "UINT32", 60),
])
def test_tensor_bytes_golden(dims, layout, dtype, expected):
    assert tm.tensor_bytes(dims, layout, dtype) == expected


def test_tensor_bytes_unknown_is_none():
    assert tm.tensor_bytes((1, 1, 32, 32), "ROW_MAJOR", "BFLOAT8_B") is None  # tiles only
    assert tm.tensor_bytes((1, 1, 32, 32), "TILE", "FLOAT64") is None
    assert tm.tensor_bytes((1, 1, 32, 32), "SOMETHING", "BFLOAT16") is None


# ---------------------------------------------------------------- 1. a row's least traffic

def test_a_rows_least_traffic_counts_its_dram_tensors_once():
    row = {"OP CODE": "BinaryNgDeviceOperation",
           # logical 50 x 70, padded to 64 x 96: 2 x 3 tiles
           **_tensor("INPUT_0", ("1[1]", "1[1]", "64[50]", "96[70]"), "TILE", "BFLOAT16",
                     "DEV_0_DRAM_INTERLEAVED"),
           **_tensor("INPUT_1", ("1[1]", "2[2]", "64[64]", "64[64]"), "TILE", "BFLOAT8_B",
                     "DEV_0_DRAM_INTERLEAVED"),
           **_tensor("INPUT_2", ("1[1]", "1[1]", "32[32]", "32[32]"), "TILE", "BFLOAT16",
                     "DEV_0_L1_HEIGHT_SHARDED"),  # in L1: no DRAM traffic
           **_tensor("OUTPUT_0", ("1[1]", "1[1]", "3[3]", "5[5]"), "ROW_MAJOR", "BFLOAT16",
                     "DEV_0_DRAM_INTERLEAVED"),
           "INPUT_3_MEMORY": float("nan")}  # no such input
    traffic, why = _traffic(row)
    assert why == "" and traffic is not None
    assert traffic.bytes == 6 * BF16_TILE + 8 * 1088 + 30 == 21_022
    assert (traffic.read, traffic.written) == (("INPUT_0", "INPUT_1"), ("OUTPUT_0",))
    assert traffic.text(288) == ("DRAM traffic: INPUT_0, INPUT_1 read once + OUTPUT_0 written "
                                 "once = 21,022 B at 288 GB/s")


def test_rows_with_an_unknown_operand_or_no_dram_tensor_stay_unbounded():
    dram = _tensor("INPUT_0", ("1[1]", "1[1]", "32[32]", "32[32]"), "TILE", "BFLOAT16",
                   "DEV_0_DRAM_INTERLEAVED")
    out = _tensor("OUTPUT_0", ("1[1]", "1[1]", "32[32]", "32[32]"), "TILE", "BFLOAT16",
                  "DEV_0_DRAM_INTERLEAVED")
    no_dtype = {"OP CODE": "UnaryDeviceOperation", **dram, **out, "OUTPUT_0_DATATYPE": None}
    traffic, why = _traffic(no_dtype)
    assert traffic is None and why.startswith(tm.NO_BOUND_UNSIZED) and "OUTPUT_0" in why
    no_shape = {"OP CODE": "UnaryDeviceOperation", **dram, **out, "INPUT_0_Y_PAD[LOGICAL]": ""}
    traffic, why = _traffic(no_shape)
    assert traffic is None and why.startswith(tm.NO_BOUND_UNSIZED) and "INPUT_0" in why
    host = {"OP CODE": "UnaryDeviceOperation", **dram, **out, "INPUT_0_MEMORY": "SYSTEM_MEMORY"}
    assert "neither DRAM nor L1" in _traffic(host)[1]
    in_l1 = {"OP CODE": "UnaryDeviceOperation", **dram, **out,
             "INPUT_0_MEMORY": "DEV_0_L1_INTERLEAVED", "OUTPUT_0_MEMORY": "DEV_0_L1_INTERLEAVED"}
    assert _traffic(in_l1) == (None, tm.NO_BOUND_L1)


def test_ops_that_touch_part_of_a_tensor_leave_it_out():
    big = _tensor("INPUT_0", ("1[1]", "1[1]", "320[320]", "320[320]"), "TILE", "BFLOAT16",
                  "DEV_0_DRAM_INTERLEAVED")
    small = _tensor("OUTPUT_0", ("1[1]", "1[1]", "32[32]", "32[32]"), "TILE", "BFLOAT16",
                    "DEV_0_DRAM_INTERLEAVED")
    # a slice reads only the part it keeps: its output written once is what is certain
    traffic, _ = _traffic({"OP CODE": "SliceDeviceOperation", **big, **small})
    assert traffic is not None and traffic.bytes == BF16_TILE and traffic.left_out == ("INPUT_0",)
    assert "INPUT_0 left out (touched in part)" in traffic.text(288)
    # a move's INPUT_1 is its preallocated output, counted once as OUTPUT_0
    move = {"OP CODE": "MoveDeviceOperation", **small,
            **_tensor("INPUT_1", ("1[1]", "1[1]", "32[32]", "32[32]"), "TILE", "BFLOAT16",
                      "DEV_0_DRAM_INTERLEAVED"),
            **_tensor("INPUT_0", ("1[1]", "1[1]", "32[32]", "32[32]"), "TILE", "BFLOAT16",
                      "DEV_0_DRAM_INTERLEAVED")}
    assert _traffic(move)[0].bytes == 2 * BF16_TILE
    # a slice write fills part of its (DRAM) output: no traffic bound
    assert _traffic({"OP CODE": "SliceWriteDeviceOperation", **big, **small}) == (
        None, tm.NO_BOUND_PARTIAL)


def test_the_bound_is_the_larger_of_traffic_and_flops_at_peak():
    """Where tt-perf-report counts FLOPs for an op bounded by its traffic, the bound is the
    larger of the traffic at the DRAM bandwidth and the FLOPs at the device's peak."""
    from types import SimpleNamespace

    from opatlas.analyze.sources.ttmetal import _traffic_bound

    tpr = tm.perf_report_module()
    spec = SimpleNamespace(dram_bandwidth_gb_s=100.0, tflops_per_core=lambda fid: 1.0)
    rep = SimpleNamespace(spec=spec, worker_cores=10, csv_format=tpr.CsvFormat.V2)
    row = {"OP CODE": "UnaryDeviceOperation",
           **_tensor("INPUT_0", ("1[1]", "1[1]", "32[32]", "32[32]"), "TILE", "BFLOAT16",
                     "DEV_0_DRAM_INTERLEAVED"),
           **_tensor("OUTPUT_0", ("1[1]", "1[1]", "32[32]", "32[32]"), "TILE", "BFLOAT16",
                     "DEV_0_L1_INTERLEAVED")}
    # 2048 B at 100 GB/s = 20.48 ns; 1e5 FLOP at 10 TFLOP/s = 10 ns
    ns, why, neck, nbytes = _traffic_bound(tpr, rep, row, 1e5)
    assert (ns, neck, nbytes) == (pytest.approx(20.48), "memory", BF16_TILE)
    assert why.endswith("; FLOPs at the device's peak")
    ns, _, neck, _ = _traffic_bound(tpr, rep, row, 1e6)  # 100 ns of compute
    assert (ns, neck) == (pytest.approx(100.0), "compute")
    assert _traffic_bound(tpr, rep, {**row, "OP CODE": "SparseMatmulDeviceOperation"}, 1e6) == (
        None, tm.NO_BOUND_PARTIAL, None, None)


# ---------------------------------------------------------------- 1. the bundled profile

def test_the_bundled_profile_bounds_its_ops_by_their_dram_traffic():
    a = read(REAL, options=WHOLE)
    rows, bounds = a.rows.set_index("id"), a.summary["bounds"]
    # before: 60 bounded rows (6 matmuls, 54 convs) and 534 without a reason
    assert bounds["dram_traffic"] == 289
    assert int(a.rows["opatlas_bound_ns"].notna().sum()) == 6 + 54 + 289
    assert bounds["no_bound"] == 272 and bounds["not_comparable"] == 0
    assert (a.rows["bound_source"].fillna("") != "").all()  # every row says why
    # by hand: CSV line 253, a ROW_MAJOR bf16 reshape 6471936 x 7 -> 25281 x 1792, DRAM to DRAM
    reshape = rows.loc[253]
    assert reshape["dram_traffic_bytes"] == 2 * 6471936 * 7 * 2 == 181_214_208
    assert reshape["opatlas_bound_ns"] == pytest.approx(181_214_208 / 288)
    assert reshape["bound_source"] == ("DRAM traffic: INPUT_0 read once + OUTPUT_0 written "
                                       "once = 181,214,208 B at 288 GB/s")
    # line 14, GroupNorm: x 122880 x 64 and its output (TILE bf16: 3840 x 2 tiles each),
    # gamma and beta 2 x 32 ROW_MAJOR, the input mask 16 x 32 x 32 TILE (16 tiles)
    norm = rows.loc[14]
    assert norm["dram_traffic_bytes"] == 2 * 7680 * BF16_TILE + 2 * 2 * 32 * 2 + 16 * BF16_TILE
    assert norm["limiter"] == "overhead"  # 150x its traffic at the DRAM bandwidth
    note = next(n for n in a.summary["notes"] if "have no opatlas bound" in n)
    assert note.startswith("272 of 621 rows have no opatlas bound (204 its tensors are all in "
                           "L1, 34 its only DRAM tensors are read or written in part, 34 an op "
                           "of its kind reads or writes only part of a tensor); 349 are bounded "
                           "(289 by their least DRAM traffic")


def test_a_row_with_an_unknown_operand_is_unbounded_and_counted(tmp_path):
    df = pd.read_csv(REAL, low_memory=False)
    line = 4  # BinaryNg SUB: three DRAM tensors
    df.loc[line - 2, "INPUT_1_DATATYPE"] = None
    path = tmp_path / "ops_perf_results_unknown.csv"
    df.to_csv(path, index=False)
    a = read(path, options=WHOLE)
    row = a.rows.set_index("id").loc[line]
    assert pd.isna(row["opatlas_bound_ns"]) and pd.isna(row["dram_traffic_bytes"])
    assert row["bound_source"] == (f"{tm.NO_BOUND_UNSIZED} (INPUT_1 in DRAM: its shape, "
                                   f"layout TILE or dtype missing unreadable)")
    assert a.summary["bounds"]["dram_traffic"] == 288
    note = next(n for n in a.summary["notes"] if "have no opatlas bound" in n)
    assert note.startswith("273 of 621") and "1 an operand opatlas cannot size" in note


# ---------------------------------------------------------------- 2. the per-device util

class _Text(HTMLParser):
    """The page's text outside scripts and styles."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style")

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def test_the_per_device_util_is_labelled_time_weighted_flops():
    a = api.analyze(REAL, extra={"ignore_signposts": True})
    page = _Text()
    page.feed(render(a))
    text = "".join(page.parts)
    # under the per-device heading, before the next section
    section = re.search(r"Per device(.*)Where the time goes", text, re.S)
    assert section and "util = FLOPs % (time-weighted)" in section.group(1)
    assert "weighted by their device time" in section.group(1)
    assert '"group_util_label": "FLOPs % (time-weighted)"' in render(a)


def test_the_label_shows_in_a_browser(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it in CI)")
    sync_api = pytest.importorskip("playwright.sync_api")
    path = api.write_html(api.analyze(REAL, extra={"ignore_signposts": True}),
                          tmp_path / "tt.html")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(path.as_uri())
            assert "FLOPs % (time-weighted)" in page.locator("#group-util").inner_text()
            # the per-device table's own column header says it too
            assert "FLOPs % (time-weighted)" in page.locator("#groups th").all_inner_texts()
        finally:
            browser.close()


def test_the_terminal_app_heads_the_per_device_util_with_its_label():
    pytest.importorskip("textual", reason="the terminal app needs Textual (opatlas[tui])")
    import asyncio

    from opatlas.analyze.tui import AnalyzerApp

    app = AnalyzerApp(api.analyze(REAL, extra={"ignore_signposts": True}))

    async def go():
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            table = app.screen.query_one("#groups")
            return [str(c.label) for c in table.columns.values()]

    assert "FLOPs % (time-weighted)" in asyncio.run(go())
