"""A backward GEMM row's bounds: the report's Orojenesis frontier shows the kernels the table
counts (dA = dC·Bᵀ and dB = Aᵀ·dC, frontiers summed) with the table's bound per call; and a
row under its bound is said with what timed it (the roofline, a fitted model, a measurement),
not blamed on a model when the roofline timed it."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from conftest import REPO, report_page
from opatlas.analyze import Analysis, api
from opatlas.analyze.html import frontier_of_heaviest_gemm, summed_frontier
from opatlas.analyze.why import TIMED_BY_WHY, backward_gemms, below_bound_notes
from opatlas.bounds import bmm, frontier, gemm
from opatlas.estimate import estimate_step, load_config
from opatlas.store import Store
from opatlas.store.db import ResultRow

SELENE = REPO / "examples" / "megatron" / "selene-gpt-1.7b.args"


@pytest.fixture(scope="module")
def llama() -> Analysis:
    return api.analyze("llama2-70b")  # its heaviest GEMM row is linear3 bwd


def _row(a: Analysis, op: str, pass_: str) -> pd.Series:
    return a.rows[(a.rows["op"] == op) & (a.rows["pass"] == pass_)].iloc[0]


def _per_call_words(a: Analysis, r: pd.Series) -> float:
    return float(r["orojenesis_bytes"]) / float(r["calls"]) / a.summary["word_bytes"]


def test_backward_frontier_is_its_two_kernels_with_the_tables_bound(llama):
    f = frontier_of_heaviest_gemm(llama)
    r = _row(llama, "linear3", "bwd")
    assert f["op"] == "linear3 bwd" and r["gemm"] == [1, 4096, 8192, 7168]
    # the table's 1,546,188,226,560 B over 2560 calls of 2 B words, not the forward's 155,189,248
    assert f["bound_words"] == _per_call_words(llama, r) == 301_989_888
    assert [list(g["dims"].values()) for g in f["gemms"]] == [
        [1, 4096, 7168, 8192], [1, 8192, 4096, 7168]] == [list(g) for g in backward_gemms(
            (1, 4096, 8192, 7168))]
    assert [g["name"] for g in f["gemms"]] == ["dA = dC·Bᵀ", "dB = Aᵀ·dC"]
    assert f["title"] == "linear3 bwd: 2 GEMM kernels per call, frontiers summed"
    assert f["algo_min"] == 2 * 121_634_816  # each kernel reads its inputs, writes its output
    assert len(f["parts"]) == 2
    word = llama.summary["word_bytes"]
    assert f["time_words"] == pytest.approx(
        r["time_s"] / r["calls"] * llama.summary["peak_bytes_s"] / word)


def test_forward_frontier_is_its_own_gemm(llama):
    fwd_only = Analysis(llama.source, llama.summary, llama.rows[llama.rows["pass"] != "bwd"],
                        llama.columns, llama.group_label)
    f = frontier_of_heaviest_gemm(fwd_only)
    r = _row(llama, "linear3", "fwd")
    assert f["title"] == "linear3 fwd: batch=1 M=4096 K=8192 N=7168"
    assert f["bound_words"] == _per_call_words(llama, r) == 155_189_248
    assert f["parts"] == [] and [g["dims"] for g in f["gemms"]] == [f["dims"]]


def test_summed_frontier_is_the_pointwise_sum_of_the_kernels():
    parts = [frontier(gemm(256, 64, 512, 2)), frontier(bmm(4, 512, 256, 64, 2))]
    buffer, accesses = summed_frontier(parts)
    assert buffer[0] == max(p.buffer[0] for p in parts)
    assert (accesses[1:] < accesses[:-1]).all()
    for words in (buffer[0], 3000, 40_000, 10**7):
        i = int((buffer <= words).sum()) - 1
        assert accesses[i] == sum(p.lookup(words) for p in parts)
    assert accesses[-1] == sum(p.algo_min for p in parts)


def test_report_draws_the_backward_frontier_it_says(tmp_path, llama):
    report = api.write_html(llama, tmp_path / "r.html")
    with report_page(report, {"width": 1280, "height": 900}) as (page, errors):
        page.wait_for_selector("svg#frontier polyline.frontier")
        assert errors == []
        svg = page.locator("svg#frontier")
        assert svg.locator("text.title").text_content() == (
            "linear3 bwd: 2 GEMM kernels per call, frontiers summed — DRAM accesses per call "
            "(words)")
        assert svg.locator("text.gemms").text_content() == (
            "dA = dC·Bᵀ: batch=1 M=4096 K=7168 N=8192  +  dB = Aᵀ·dC: batch=1 M=8192 K=4096 "
            "N=7168")
        assert svg.locator("polyline.part").count() == 2
        tip = svg.locator("circle.bound").get_attribute("data-tip")
        assert "301.99 Mwords per call" in tip  # the table's bound, per call
        # the dot sits on the drawn (summed) curve: a vertex of the step line has its height
        cy = float(svg.locator("circle.bound").get_attribute("cy"))
        line = svg.locator("polyline.frontier").get_attribute("points")
        heights = {round(float(pt.split(",")[1]), 6) for pt in line.split()}
        assert round(cy, 6) in heights


def test_a_roofline_backward_moves_what_its_two_kernels_must():
    args = f"@{SELENE}"  # as `opatlas analyze --megatron-args @FILE --gpus 32` reads it
    a = api.analyze(args, kind="config", extra={"megatron_args": args, "gpus": 32})
    r = _row(a, "bmm", "bwd")
    b, m, k, n = r["gemm"]
    # the bound is what its two kernels must move at least: each reads its inputs and writes
    # its output once (the buffer holds a head's GEMM), so dC (m·n) is read twice
    two_kernels = sum(frontier(bmm(*g[:4], 2) if g[0] > 1 else gemm(*g[1:], 2)).algo_min
                      for g in backward_gemms((b, m, k, n)))
    assert two_kernels == 2 * b * (m * k + k * n + m * n)
    assert r["orojenesis_bytes"] == pytest.approx(r["calls"] * 2 * two_kernels)
    # the op catalog's least traffic of the backward is the same two kernels' (each reads
    # dC): the roofline (memory-bound here, at 0.8 of the bandwidth) is never under the bound
    assert r["timed_by"] == "roofline" and r["bytes"] == pytest.approx(r["orojenesis_bytes"])
    assert r["headroom"] == pytest.approx(1 / 0.8)
    assert not [x for x in a.summary["notes"] if "faster than their bound" in x]


@pytest.mark.filterwarnings("ignore::UserWarning")  # the estimator's roofline fallback, said
def test_data_mode_says_which_ops_the_roofline_timed():
    a = api.analyze(REPO / "examples" / "validation" / "gpt-1.7b.yml")  # ops.mode data
    by = dict(zip(zip(a.rows["op"], a.rows["pass"], strict=True), a.rows["timed_by"],
                  strict=True))
    assert by[("attention_dropout", "bwd")] == "roofline"  # the bundled data lacks it
    assert by[("grad_accumulate", "step")] == "roofline"
    assert by[("linear1", "bwd")] == by[("bmm", "recompute")] == by[("optimizer", "step")] == \
        "model"
    comm = a.rows[a.rows["category"].str.endswith("_comm")]
    assert len(comm) and comm["timed_by"].isna().all()  # collectives: not ops of the catalog


def test_measured_rows_under_their_bound_are_said_as_measured(tmp_path):
    est = estimate_step(load_config("llama2-7b"))
    item = next(i for i in est.items if i.name == "linear3" and i.pass_ == "bwd")
    with Store(tmp_path / "m.duckdb") as st:  # a time far under any bound
        st.add_results([ResultRow("v1", "linear3", json.dumps({**dict(item.shape),
                                                               "dtype": "bf16"}), "bwd",
                                  "cuda", "NVIDIAH10080GBHBM3", "bf16", "ok", repeats=5,
                                  median_ns=1e3)])
    a = api.analyze("llama2-7b", measured=tmp_path / "m.duckdb")
    r = _row(a, "linear3", "bwd")
    assert r["timed_by"] == "measured" and r["headroom"] < 1
    assert _row(a, "linear3", "fwd")["timed_by"] == "roofline"
    note = next(x for x in a.summary["notes"] if "faster than their bound" in x)
    assert re.search(r"^1 row\(s\) faster than their bound .*linear3 bwd \(1\)", note)
    assert note.endswith(f"{TIMED_BY_WHY['measured']}; the step time and MFU include them")
    assert [c.key for c in a.columns][5:9] == ["time_s", "predicted_time_s", "measured_time_s",
                                               "error"]


def test_below_bound_note_names_each_cause_with_its_rows():
    rows = pd.DataFrame({"op": ["bmm", "linear1", "gelu"], "pass": ["bwd", "fwd", "fwd"],
                         "headroom": [0.6, 0.9, 2.0],
                         "timed_by": ["roofline", "measured", "model"]})
    (note,) = below_bound_notes(rows, "row(s)", "GENERIC")
    assert note.startswith("2 row(s) faster than their bound (headroom < 1): bmm bwd (1), "
                           "linear1 fwd (1); the lowest is 0.60x (bmm bwd)")
    assert (f"flagged 'below bound': bmm bwd: {TIMED_BY_WHY['roofline']}; linear1 fwd: "
            f"{TIMED_BY_WHY['measured']}; the step time and MFU include them") in note
    assert "GENERIC" not in note and TIMED_BY_WHY["model"] not in note
    (other,) = below_bound_notes(rows.drop(columns="timed_by"), "row(s)", "GENERIC")
    assert other.endswith("flagged 'below bound': GENERIC")  # sources that do not say


def test_a_backward_row_of_one_kernel_draws_that_kernel(llama):
    """A trace's backward mm is one kernel of its own shape (``gemms`` of one): the chart
    draws it alone, and its bound is the table's per call, not two kernels'."""
    rows = llama.rows.copy()
    i = rows.index[(rows["op"] == "linear3") & (rows["pass"] == "bwd")][0]
    rows.at[i, "gemms"] = [rows.at[i, "gemm"]]  # as a trace's aten::mm backward row has it
    one = Analysis(llama.source, llama.summary, rows, llama.columns, llama.group_label)
    f = frontier_of_heaviest_gemm(one)
    assert f["title"] == "linear3 bwd: batch=1 M=4096 K=8192 N=7168" and f["parts"] == []
    # one kernel of the forward's shape: the forward's least traffic at the buffer
    assert f["bound_words"] == _per_call_words(llama, _row(llama, "linear3", "fwd"))
