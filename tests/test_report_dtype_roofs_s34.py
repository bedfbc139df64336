"""Review s34 of the HTML report of a mixed-precision torch.profiler trace: the summary keeps each
dtype's compute peak (``peak_flops_by_dtype``, through --save/--load), the roofline draws one
compute roof per dtype under one memory roof (a single-dtype trace keeps its one roof), each
point is tied to its own dtype's roof, and the heaviest GEMM's Orojenesis frontier counts the
words of that GEMM's own dtype."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_in_process, report_page
from opatlas.analyze import api
from opatlas.analyze.html import frontier_of_heaviest_gemm, row_dtypes

BF16, F32 = "c10::BFloat16", "float"
H100 = [{"name": "NVIDIA H100 80GB HBM3"}]
H100_BF16, H100_FP32, H100_BW = 989.4e12, 66.9e12, 3.35e12
N = 4096


def _op(name: str, ts: float, dur: float, dims: list, types: list) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"Input Dims": dims, "Input type": types}}


def _launched(corr: int, ts: float, kernel_ts: float, kernel_dur: float) -> list[dict]:
    """A runtime launch at ``ts`` (inside its op) and the kernel it launched."""
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": ts, "dur": 1, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7, "ts": kernel_ts,
             "dur": kernel_dur, "args": {"correlation": corr}}]


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": H100}))
    return path


def _mixed(path: Path) -> Path:
    """On an H100: a bf16 4096³ mm (200 µs: the most FLOPs) and an fp32 2048³ mm (400 µs: the
    heaviest GEMM, of the other dtype) among an fp32 layer norm."""
    m = N // 2
    return _write(path, [
        _op("aten::mm", 1000, 20, [[N, N], [N, N]], [BF16, BF16]),
        *_launched(1, 1005, 1100, 200),
        _op("aten::mm", 1030, 10, [[m, m], [m, m]], [F32, F32]),
        *_launched(2, 1032, 1310, 400),
        _op("aten::layer_norm", 1050, 10, [[N, N], [], [N], [N], [], []],
            [F32, "", F32, F32, "Scalar", "Scalar"]),
        *_launched(3, 1052, 1720, 60)])


def _fp32_only(path: Path) -> Path:
    """The same ops, all fp32: one dtype, one roof."""
    return _write(path, [
        _op("aten::mm", 1000, 20, [[N, N], [N, N]], [F32, F32]),
        *_launched(1, 1005, 1100, 2500),
        _op("aten::layer_norm", 1050, 10, [[N, N], [], [N], [N], [], []],
            [F32, "", F32, F32, "Scalar", "Scalar"]),
        *_launched(2, 1052, 3700, 60)])


def _payload_of(html: Path) -> dict[str, Any]:
    text = html.read_text()
    return json.loads(re.search(r"<script id=data type=application/json>(.*?)</script>", text,
                                re.S).group(1))


def _mm(a: Any, dtype_word: int) -> Any:
    """The mm row whose GEMM is of the 4096³ (bf16) or 2048³ (fp32) one."""
    size = N if dtype_word == 2 else N // 2
    rows = a.rows[(a.rows["op"] != "other") & a.rows["gemm"].map(
        lambda g: isinstance(g, list) and g[1] == size)]
    assert len(rows) == 1
    return rows.iloc[0]


# ------------------------------------------------------------ 1. the summary's per-dtype peaks

def test_a_mixed_trace_keeps_each_dtypes_peak_through_save_and_load(tmp_path, capsys):
    trace, saved = _mixed(tmp_path / "mixed.json"), tmp_path / "a.json"
    a = api.analyze(trace)
    by = a.summary["peak_flops_by_dtype"]
    assert list(by) == ["bf16", "fp32"]  # by FLOPs done, as the peaks line says them
    assert by == {"bf16": pytest.approx(H100_BF16), "fp32": pytest.approx(H100_FP32)}
    assert a.summary["peak_flops_s"] == pytest.approx(H100_BF16)
    code, _, err = cli_in_process(capsys, "analyze", str(trace), "--save", str(saved), "--json")
    assert code == 0, err
    html = tmp_path / "r.html"
    code, out, err = cli_in_process(capsys, "analyze", "--load", str(saved), "--json",
                                    "--html", str(html))
    assert code == 0, err
    assert json.loads(out)["summary"]["peak_flops_by_dtype"] == by  # saved.check lets it be
    peaks = _payload_of(html)["peaks"]
    assert peaks["by_dtype"] == by and peaks["flops"] == pytest.approx(H100_BF16)


def test_a_single_dtype_trace_has_no_per_dtype_peaks(tmp_path):
    a = api.analyze(_fp32_only(tmp_path / "fp32.json"))
    assert "peak_flops_by_dtype" not in a.summary
    data = _payload_of(api.write_html(a, tmp_path / "r.html"))
    assert "by_dtype" not in data["peaks"]
    assert all(r["dtype"] == "fp32" for r in data["rows"])  # the dtype column, one value


# ------------------------------------------------------------ 2. each row's dtype

def test_each_rows_dtype_is_the_one_it_was_rated_against(tmp_path):
    a = api.analyze(_mixed(tmp_path / "mixed.json"))
    of = row_dtypes(a)
    assert (of[_mm(a, 2).name], of[_mm(a, 4).name]) == ("bf16", "fp32")
    assert of[a.rows["name"] == "aten::layer_norm"].tolist() == ["fp32"]
    data = _payload_of(api.write_html(a, tmp_path / "r.html"))
    assert sorted(r["dtype"] for r in data["rows"]) == ["bf16", "fp32", "fp32"]


# ------------------------------------------------------------ 3. the frontier's words

def test_the_heaviest_gemms_frontier_counts_words_of_its_own_dtype(tmp_path):
    a = api.analyze(_mixed(tmp_path / "mixed.json"))
    assert a.summary["word_bytes"] == 2  # bf16 does the most FLOPs
    f, row = frontier_of_heaviest_gemm(a), _mm(a, 4)
    assert f["dims"] == {"batch": 1, "M": N // 2, "K": N // 2, "N": N // 2}  # the fp32 mm
    assert f["onchip_words"] == pytest.approx(a.summary["onchip_bytes"] / 4)  # not / 2
    assert f["time_words"] == pytest.approx(400e-6 * H100_BW / 4)
    # where the device's buffer sits on the frontier is the row's own Orojenesis bound,
    # which explain() counted in fp32 words
    assert f["bound_words"] * 4 == pytest.approx(row["orojenesis_bytes"] / row["calls"])


# ------------------------------------------------------------ 4. the roofline in Chromium

def _attrs(page: Any, selector: str, *names: str) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        selector, "(els, names) => els.map(e => Object.fromEntries(names.map(n => "
                  "[n, e.getAttribute(n)])))", list(names))


def test_a_mixed_trace_has_a_compute_roof_per_dtype(tmp_path):
    report = api.write_html(api.analyze(_mixed(tmp_path / "mixed.json")), tmp_path / "r.html")
    with report_page(report, {"width": 1280, "height": 900}, console_errors=True) as (page,
                                                                                    errors):
        page.wait_for_selector("svg#roofline circle")
        roofs = _attrs(page, "svg#roofline line.roof.compute", "data-dtype", "data-flops",
                       "data-tip", "x1", "y1", "x2", "stroke")
        assert [r["data-dtype"] for r in roofs] == ["bf16", "fp32"]
        assert [float(r["data-flops"]) for r in roofs] == [pytest.approx(H100_BF16),
                                                          pytest.approx(H100_FP32)]
        assert roofs[0]["data-tip"].startswith("bf16 peak 989.40 TFLOP/s")
        assert roofs[1]["data-tip"].startswith("fp32 peak 66.90 TFLOP/s")
        labels = page.eval_on_selector_all("svg#roofline text.roof-label",
                                           "els => els.map(e => e.textContent)")
        assert labels == ["bf16 989.40 TFLOP/s", "fp32 66.90 TFLOP/s"]
        (mem,) = _attrs(page, "svg#roofline line.roof.memory", "x1", "y1", "x2", "y2",
                        "data-tip")
        assert mem["data-tip"] == "memory roof: 3.35 TB/s"
        assert page.locator("svg#roofline polyline").count() == 0  # not the one-peak roof
        xy = {k: float(v) for k, v in mem.items() if k != "data-tip"}
        bf16, fp32 = ({k: float(r[k]) for k in ("x1", "y1", "x2")} for r in roofs)
        # the memory roof rises to the highest peak; the lower roof starts on it, at its ridge
        assert (xy["x2"], xy["y2"]) == (pytest.approx(bf16["x1"]), pytest.approx(bf16["y1"]))
        slope = (xy["y2"] - xy["y1"]) / (xy["x2"] - xy["x1"])
        assert fp32["y1"] == pytest.approx(xy["y1"] + slope * (fp32["x1"] - xy["x1"]))
        assert fp32["y1"] > bf16["y1"] and fp32["x2"] == pytest.approx(bf16["x2"])
        points = _attrs(page, "svg#roofline circle", "data-tip", "stroke")
        assert len(points) == 3
        own = {p["data-tip"].split("\n")[3]: p["stroke"] for p in points}
        assert own == {"bf16: against its roof of 989.40 TFLOP/s": roofs[0]["stroke"],
                       "fp32: against its roof of 66.90 TFLOP/s": roofs[1]["stroke"]}
        assert errors == []


def test_a_single_dtype_trace_keeps_its_one_roof(tmp_path):
    report = api.write_html(api.analyze(_fp32_only(tmp_path / "fp32.json")),
                            tmp_path / "r.html")
    with report_page(report, {"width": 1280, "height": 900}, console_errors=True) as (page,
                                                                                    errors):
        page.wait_for_selector("svg#roofline circle")
        assert page.locator("svg#roofline .roof, svg#roofline .roof-label").count() == 0
        (roof,) = _attrs(page, "svg#roofline polyline", "data-tip", "stroke")
        assert roof == {"data-tip": "peak 66.90 TFLOP/s, 3.35 TB/s", "stroke": "#1d2330"}
        points = _attrs(page, "svg#roofline circle", "data-tip", "stroke")
        assert len(points) == 2 and {p["stroke"] for p in points} == {"#fff"}
        assert not any("against its roof" in p["data-tip"] for p in points)
        assert errors == []


def test_the_per_dtype_peaks_are_no_detail_table_of_their_own(tmp_path):
    from opatlas.analyze.tables import detail_tables

    a = api.analyze(_mixed(tmp_path / "m.json"))
    assert "peak_flops_by_dtype" in a.summary
    shown = json.dumps(detail_tables(a)).lower()
    assert "by dtype" not in shown and "by_dtype" not in shown
