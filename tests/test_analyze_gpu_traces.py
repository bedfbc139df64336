"""The analyzer's GPU-kernel path on real torch.profiler traces of an NVIDIA H100 (see
tests/data/gpu_traces/PROVENANCE.md): one training step of a tiny GPT, attention unfused
(matmul, masked_fill, softmax, matmul) or through scaled_dot_product_attention, at three
sequence lengths.

Every expected value comes from the trace file itself, parsed here with json and gzip and
linked here by its flow events (``ac2g``: launch -> kernel), independently of opatlas's
reader (which links by the ``correlation`` argument), or by hand from the model's sizes."""

from __future__ import annotations

import functools
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process
from opatlas.analyze import api
from opatlas.analyze.chrome import AUTOCAST_TYPES, split_events
from opatlas.analyze.model import Analysis
from opatlas.analyze.why import Peaks, explain

DATA = Path(__file__).parent / "data" / "gpu_traces"
SEQS = (512, 1024, 2048)
VARIANTS = ("unfused", "sdpa")
NAMES = [f"gpt_block_{v}_s{s}" for v in VARIANTS for s in SEQS]
BATCH, DIM, HEADS, FFN, VOCAB = 4, 1024, 16, 4096, 8192  # scripts/gpu_traces.py
DEVICE_CATS = {"kernel", "gpu_memset", "gpu_memcpy"}
H100 = "H100-SXM5-80GB"  # the catalog's name for "NVIDIA H100 80GB HBM3"


@dataclass
class Raw:
    """A trace as this test reads it: its operator events, and each device event (kernel,
    memset, memcpy) with the operator events enclosing its launch, outermost first."""

    doc: dict[str, Any]
    ops: list[dict[str, Any]]
    device: list[dict[str, Any]]
    enclosing: list[list[dict[str, Any]]]

    def kernel_us(self, op: dict[str, Any]) -> float:
        """Summed duration (µs) of the device events launched inside operator event ``op``."""
        return sum(k["dur"] for k, up in zip(self.device, self.enclosing, strict=True)
                   if any(o is op for o in up))

    def kernels(self, op: dict[str, Any]) -> list[str]:
        return [k["name"] for k, up in zip(self.device, self.enclosing, strict=True)
                if any(o is op for o in up)]

    def outermost(self, name: str) -> list[dict[str, Any]]:
        """The events of ``name`` that no event of the same name encloses (autocast records
        an op twice, the re-dispatched call inside the first)."""
        evs = [e for e in self.ops if e["name"] == name]
        return [e for e in evs if not any(o is not e and _inside(e, o) for o in evs)]


def _inside(e: dict[str, Any], outer: dict[str, Any]) -> bool:
    return (e["pid"], e["tid"]) == (outer["pid"], outer["tid"]) and \
        outer["ts"] <= e["ts"] < outer["ts"] + outer["dur"]


def _casts_in(r: Raw, e: dict[str, Any]) -> list[dict[str, Any]]:
    """The outermost dtype casts (aten::to / aten::_to_copy) inside operator event ``e``."""
    cands = [c for c in r.ops if c["name"] in ("aten::to", "aten::_to_copy") and _inside(c, e)]
    return [c for c in cands if not any(o is not c and _inside(c, o) for o in cands)]


def _dims(e: dict[str, Any]) -> list[Any]:
    return e["args"]["Input Dims"]


@functools.cache
def raw(name: str) -> Raw:
    doc = json.loads(gzip.decompress((DATA / f"{name}.json.gz").read_bytes()))
    evs = doc["traceEvents"]
    ops = [e for e in evs if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    device = [e for e in evs if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]
    where = lambda e: (e["pid"], e["tid"], e["ts"])  # noqa: E731
    starts = {e["id"]: where(e) for e in evs if e.get("cat") == "ac2g" and e["ph"] == "s"}
    ends: dict[tuple, list[int]] = {}
    for e in evs:
        if e.get("cat") == "ac2g" and e["ph"] == "f":
            ends.setdefault(where(e), []).append(e["id"])
    launches: dict[tuple, list[dict]] = {}
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            launches.setdefault(where(e), []).append(e)
    enclosing = []
    for k in device:
        (flow,) = ends[where(k)]  # exactly one flow ends at each device event ...
        (launch,) = launches[starts[flow]]  # ... and starts at exactly one launch
        up = [o for o in ops if _inside(launch, o)]
        enclosing.append(sorted(up, key=lambda o: (o["ts"], -o["dur"])))
    return Raw(doc, ops, device, enclosing)


@functools.cache
def analysis(name: str) -> Analysis:
    return api.analyze(DATA / f"{name}.json.gz")


def _rows(a: Analysis, name: str) -> pd.DataFrame:
    return a.rows[a.rows["name"] == name]


# --- every kernel attributed once, the times adding up -------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_every_kernel_is_attributed_once_and_the_times_add_up(name):
    r, a = raw(name), analysis(name)
    # by the flow events: each device event has one launch, and every launch sits in an op
    assert len(r.device) > 50 and all(r.enclosing)
    total_us = sum(k["dur"] for k in r.device)
    assert a.summary["time_basis"] == "GPU kernel time of each op's launches"
    assert a.total_time_s == pytest.approx(total_us * 1e-6, rel=1e-12)
    assert a.rows["time_s"].sum() == pytest.approx(total_us * 1e-6, rel=1e-9)
    # no kernel left over as a row of its own ("kernel NAME": its launch not found)
    assert not a.rows["name"].str.startswith("kernel ").any()


@pytest.mark.parametrize("name", NAMES)
def test_each_gemm_row_is_the_time_of_its_own_kernels(name):
    """Linear rows (forward, autocast's outer event) and mm rows (backward GEMMs): time,
    calls and shape as the raw events' kernels and record_shapes give them."""
    r, a = raw(name), analysis(name)
    lin: dict[tuple, list[float]] = {}
    for e in r.outermost("aten::linear"):
        x, w = _dims(e)[:2]
        casts = sum(r.kernel_us(c) for c in _casts_in(r, e))  # autocast's: a row of their own
        lin.setdefault((math.prod(x[:-1]), x[-1], w[0]), []).append(r.kernel_us(e) - casts)
    linear = _rows(a, "aten::linear")
    assert len(linear) == len(lin) == 5  # qkv, proj, up, down, head
    for _, row in linear.iterrows():
        s = row["shape"]
        times = lin[(s["M"], s["K"], s["N"])]
        assert row["pass"] == "fwd" and row["calls"] == len(times)
        assert row["time_s"] == pytest.approx(sum(times) * 1e-6, rel=1e-9)
    mm: dict[tuple, list[float]] = {}
    for e in r.outermost("aten::mm"):
        if not any(o["name"] in ("aten::linear", "aten::matmul") and _inside(e, o) for o in r.ops):
            (m, k), (_, n) = _dims(e)[:2]
            mm.setdefault((m, k, n), []).append(r.kernel_us(e))
    rows = _rows(a, "aten::mm")
    assert len(mm) >= 8 and set(rows["pass"]) == {"bwd"}
    got = {(s["M"], s["K"], s["N"]): (t, c) for s, t, c in
           zip(rows["shape"], rows["time_s"], rows["calls"], strict=True)}
    assert got.keys() == mm.keys()
    for key, times in mm.items():
        assert got[key][1] == len(times)
        assert got[key][0] == pytest.approx(sum(times) * 1e-6, rel=1e-9), key


@pytest.mark.parametrize("seq", SEQS)
def test_sdpa_runs_one_fused_kernel_each_way_and_no_softmax(seq):
    r, a = raw(f"gpt_block_sdpa_s{seq}"), analysis(f"gpt_block_sdpa_s{seq}")
    (fwd,) = r.outermost("aten::scaled_dot_product_attention")
    (bwd,) = r.outermost("aten::_scaled_dot_product_cudnn_attention_backward")
    assert _dims(fwd)[:3] == [[BATCH, HEADS, seq, DIM // HEADS]] * 3  # q, k, v
    fused = [k for k in r.kernels(fwd) if "sdpa" in k or "flash" in k]
    assert len(fused) == 1 and "fprop" in fused[0]
    assert any("bprop" in k for k in r.kernels(bwd))
    rows = a.rows[a.rows["op"] == "attention"].set_index("pass")
    assert rows.loc["fwd", "time_s"] == pytest.approx(r.kernel_us(fwd) * 1e-6, rel=1e-9)
    assert rows.loc["bwd", "time_s"] == pytest.approx(r.kernel_us(bwd) * 1e-6, rel=1e-9)
    shape = rows.loc["fwd", "shape"]
    assert (shape["q_len"], shape["kv_len"], shape["causal"]) == (seq, seq, True)
    # causal: half of 2·b·h·s²·(2·head_dim) (QKᵀ and PV), the backward 2.5 times that
    fwd_flops = 2 * BATCH * HEADS * seq * seq * 2 * (DIM // HEADS) / 2
    assert rows.loc["fwd", "flops"] == fwd_flops
    assert rows.loc["bwd", "flops"] == 2.5 * fwd_flops
    # no softmax op, and the only softmax kernels are the loss's log-softmax, there and back
    assert not r.outermost("aten::softmax") and not r.outermost("aten::_softmax")
    assert len(_softmax_kernels(r)) == 2
    assert "softmax" not in set(a.rows["op"][a.rows["shape"].map(_attention_sized)])


def _softmax_kernels(r: Raw) -> list[str]:
    return [k["name"] for k in r.device if "softmax" in k["name"].lower()]


def _attention_sized(shape: dict[str, Any]) -> bool:
    return shape.get("rows") == BATCH * HEADS * shape.get("width", -1)


@pytest.mark.parametrize("seq", SEQS)
def test_unfused_softmax_kernels_follow_from_the_model(seq):
    """One attention softmax forward and backward (b·h·s rows of s scores) besides the loss's
    log-softmax forward and backward: four softmax kernels."""
    r, a = raw(f"gpt_block_unfused_s{seq}"), analysis(f"gpt_block_unfused_s{seq}")
    assert len(_softmax_kernels(r)) == 4
    (sm,) = r.outermost("aten::softmax")
    assert _dims(sm)[0] == [BATCH, HEADS, seq, seq]
    assert [k for k in r.kernels(sm) if "softmax" in k.lower()] == \
        [k for k in _softmax_kernels(r) if "softmax_warp_forward" in k]
    row = a.rows[(a.rows["op"] == "softmax") & (a.rows["pass"] == "fwd")]
    assert len(row) == 1
    assert row.iloc[0]["shape"] == {"rows": BATCH * HEADS * seq, "width": seq}
    assert row.iloc[0]["time_s"] == pytest.approx(r.kernel_us(sm) * 1e-6, rel=1e-9)


# --- attention time against the model -------------------------------------------------------

def _attention_raw_us(r: Raw) -> float:
    """Kernel time of the attention core from the raw events: the fused op there and back,
    or the 4-d matmuls, the backward's batched bmm (b·h batches) and the 4-d softmax."""
    ops = r.outermost("aten::scaled_dot_product_attention") + \
        r.outermost("aten::_scaled_dot_product_cudnn_attention_backward")
    ops += [e for e in r.outermost("aten::matmul") if len(_dims(e)[0]) == 4]
    ops += [e for e in r.outermost("aten::bmm") if _dims(e)[0][0] == BATCH * HEADS
            and not any(o["name"] == "aten::matmul" and _inside(e, o) for o in r.ops)]
    ops += [e for n in ("aten::softmax", "aten::_softmax_backward_data")
            for e in r.outermost(n) if len(_dims(e)[0]) == 4]
    return sum(r.kernel_us(e) for e in ops)


def _attention_rows_s(a: Analysis) -> float:
    rows = a.rows
    core = (rows["op"] == "attention") | \
        (rows["op"].isin(["matmul", "bmm"]) & rows["shape"].map(lambda s: s.get("batch")
                                                               == BATCH * HEADS)) | \
        ((rows["op"] == "softmax") & rows["shape"].map(_attention_sized)) | \
        ((rows["op"] == "cast") & rows["shape"].map(  # autocast's cast of the b·h·s² scores
            lambda s: s.get("elements") in {BATCH * HEADS * q * q for q in SEQS}))
    return float(rows.loc[core, "time_s"].sum())


@pytest.mark.parametrize("variant", VARIANTS)
def test_attention_time_grows_with_the_sequence(variant):
    times = []
    for seq in SEQS:
        name = f"gpt_block_{variant}_s{seq}"
        t = _attention_rows_s(analysis(name))
        assert t == pytest.approx(_attention_raw_us(raw(name)) * 1e-6, rel=1e-9)
        times.append(t)
    assert times[0] < times[1] < times[2]
    # its FLOPs grow 16 times from s=512 to 2048 (b·h·s² scores)
    assert times[2] > 4 * times[0]


def test_fused_attention_is_faster_than_unfused_at_2048():
    sdpa = _attention_rows_s(analysis("gpt_block_sdpa_s2048"))
    unfused = _attention_rows_s(analysis("gpt_block_unfused_s2048"))
    assert 0 < sdpa < unfused / 4
    # and the step as a whole: the unfused one's s x s scores dominate its extra time
    assert analysis("gpt_block_sdpa_s2048").total_time_s < \
        analysis("gpt_block_unfused_s2048").total_time_s


# --- FLOPs, bytes and dtype of the GEMMs, by hand ------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
def test_qkv_gemms_at_1024_match_the_hand_count(variant):
    a, r = analysis(f"gpt_block_{variant}_s1024"), raw(f"gpt_block_{variant}_s1024")
    t = BATCH * 1024  # tokens
    lin = _rows(a, "aten::linear")
    qkv = lin[lin["shape"].map(lambda s: s["N"] == 3 * DIM)].iloc[0]
    assert qkv["flops"] == 2 * 4 * 1024 * 1024 * 3072 + t * 3 * DIM  # GEMM + bias
    # bf16 (autocast ran the GEMM on cast inputs): two bytes a word, each tensor once
    assert qkv["dtype"] == "bf16"
    assert qkv["bytes"] == 2 * (t * DIM + DIM * 3 * DIM + t * 3 * DIM)
    assert qkv["gemm"] == [1, t, DIM, 3 * DIM]
    # its backward: dX = dY·W (t x 3d x d) and dW = dYᵀ·X (3d x t x d), as record_shapes has
    shapes = {tuple(map(tuple, _dims(e)[:2])) for e in r.outermost("aten::mm")}
    assert ((t, 3 * DIM), (3 * DIM, DIM)) in shapes and ((3 * DIM, t), (t, DIM)) in shapes
    mm = _rows(a, "aten::mm")
    for m, k, n in ((t, 3 * DIM, DIM), (3 * DIM, t, DIM)):
        row = mm[mm["shape"].map(lambda s, m=m, k=k, n=n: (s["M"], s["K"], s["N"]) == (m, k, n))]
        assert len(row) == 1 and row.iloc[0]["calls"] == 1
        assert row.iloc[0]["flops"] == 2 * m * k * n == 2 * 4 * 1024 * 1024 * 3072
        assert row.iloc[0]["bytes"] == 2 * (m * k + k * n + m * n)


@pytest.mark.parametrize("name", NAMES)
def test_autocast_linears_are_counted_in_bf16_and_not_under_their_bound(name):
    """Under autocast the outer aten::linear event records fp32 inputs and the one inside it
    (the call that ran) bf16 ones: every linear is a bf16 GEMM, rated against the bf16 peak,
    and none is faster than that bound (rated at the fp32 peak some were 8x 'below' it)."""
    r, a = raw(name), analysis(name)
    ran = {tuple(e["args"]["Input type"][:2]) for e in r.ops if e["name"] == "aten::linear"
           and e not in r.outermost("aten::linear")}
    assert ran == {("c10::BFloat16", "c10::BFloat16")}
    assert {"float"} <= {e["args"]["Input type"][0] for e in r.outermost("aten::linear")}
    lin = _rows(a, "aten::linear")
    assert set(lin["dtype"]) == {"bf16"}
    assert (lin["headroom"] >= 1).all() and not lin["flags"].str.contains("below bound").any()


def test_autocast_redispatch_takes_the_inner_input_types():
    """split_events on a hand-made trace: an fp32 linear enclosing its bf16 re-dispatch takes
    the bf16 types (its own kept); a sibling call after it and a softmax whose re-dispatch
    adds only a scalar (its dtype) keep theirs."""
    def op(name: str, ts: float, dur: float, dims: list, types: list) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": dur, "args": {"Input Dims": dims, "Input type": types}}

    dims = [[8, 16], [32, 16], [32]]
    f32, bf16 = ["float"] * 3, ["c10::BFloat16"] * 3
    sm = [[2, 4, 4], [], []]
    doc = {"traceEvents": [
        op("aten::linear", 100.0, 50.0, dims, f32), op("aten::to", 101.0, 5.0, [[32, 16]], ["float"]),
        op("aten::linear", 110.0, 30.0, dims, bf16), op("aten::linear", 200.0, 10.0, dims, f32),
        op("aten::softmax", 300.0, 20.0, sm, ["c10::BFloat16", "Scalar", ""]),
        op("aten::softmax", 301.0, 15.0, sm, ["c10::BFloat16", "Scalar", "Scalar"])]}
    ops, _, _ = split_events(doc)
    types = [a["Input type"] for a in ops.args]
    assert types[0] == bf16 and ops.args[0][AUTOCAST_TYPES] == f32
    assert types[1:4] == [["float"], bf16, f32] and AUTOCAST_TYPES not in ops.args[3]
    assert types[4] == ["c10::BFloat16", "Scalar", ""] and AUTOCAST_TYPES not in ops.args[4]


def test_the_vocab_head_does_the_most_gemm_work():
    """The head (d -> vocab over every token, and its two backward GEMMs) has the most FLOPs
    of any GEMM call, 2·t·d·V by hand; on the fused traces, which have no s x s score GEMMs
    or fp32 casts of them, its three GEMMs are also the three longest GEMM calls."""
    for name in NAMES:
        a = analysis(name)
        t = BATCH * int(name.rsplit("_s", 1)[1])
        gemm = a.rows[a.rows["op"].isin(["linear", "mm", "matmul", "bmm"])]
        per_call = gemm["flops"] / gemm["calls"]
        head = gemm["shape"].map(lambda s, t=t: s["batch"] == 1 and sorted(
            (s["M"], s["K"], s["N"])) == sorted((t, DIM, VOCAB)))
        assert head.sum() >= 2 and gemm.loc[head, "calls"].sum() == 3  # fwd, dX, dW
        assert (per_call[head] == 2 * t * DIM * VOCAB).all()
        assert per_call[~head].max() < per_call[head].min()
        if "sdpa" in name:
            slowest = (gemm["time_s"] / gemm["calls"]).sort_values(ascending=False)
            assert head[slowest.index[:head.sum()]].all(), name


# --- rows that did no GPU work --------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_an_op_that_launched_no_kernel_is_not_flagged_below_its_bound(name):
    """AdamW's step counters are CPU tensors: their _foreach_add_ launches no kernel. Its row
    has no GPU time, hence no headroom, and is not 'faster than its bound' (it read 0.00x)."""
    r, a = raw(name), analysis(name)
    steps = [e for e in r.outermost("aten::_foreach_add_")
             if _dims(e)[0] == [[]] * 14 and not r.kernels(e)]
    assert len(steps) == 1  # 14 parameters, each with a 0-d step counter
    row = a.rows[(a.rows["name"] == "aten::_foreach_add_")
                 & a.rows["shape"].map(lambda s: s.get("elements") == 14)]
    assert len(row) == 1 and row.iloc[0]["time_s"] == 0
    assert np.isnan(row.iloc[0]["headroom"]) and row.iloc[0]["flags"] == ""
    assert not any("0.00x" in n for n in a.summary["notes"])


def test_explain_gives_no_headroom_to_a_row_without_time():
    rows = pd.DataFrame({"op": ["x", "y"], "pass": "fwd", "calls": 1.0, "time_s": [0.0, 2e-6],
                         "flops": [1e9, 1e9], "bytes": [1e6, 1e6], "shape": [{}, {}]})
    out = explain(rows, Peaks("d", 1e15, 1e12, 0.0, 2))
    assert out["bound_time_s"].tolist() == [1e-6, 1e-6]  # the bound is the work's either way
    assert np.isnan(out["headroom"].iloc[0]) and out["flags"].iloc[0] == ""
    assert out["headroom"].iloc[1] == pytest.approx(2.0) and out["flags"].iloc[1] == ""


# --- the CLI's views on each file -----------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_cli_json_and_html_name_the_h100(name, capsys, tmp_path):
    r = raw(name)
    assert r.doc["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    html = tmp_path / "r.html"
    code, out, err = cli_in_process(capsys, "analyze", str(DATA / f"{name}.json.gz"), "--json",
                                    "--html", str(html))
    assert code == 0 and "Traceback" not in err, err
    doc = json.loads(out)
    assert doc["summary"]["device"] == H100
    assert doc["summary"]["total_time_s"] == pytest.approx(
        sum(k["dur"] for k in r.device) * 1e-6, rel=1e-12)
    assert sum(row["time_s"] for row in doc["rows"]) == pytest.approx(
        doc["summary"]["total_time_s"], rel=1e-9)
    text = html.read_text()
    assert text.startswith("<!DOCTYPE html>") or text.lstrip().lower().startswith("<!doctype")
    assert H100 in text
