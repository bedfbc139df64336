"""The trace source on a real torch.profiler trace (a transformer block forward and backward on
the CPU) and on a synthetic GPU trace; and bad traces rejected with one clear paragraph."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from opatlas.analyze import api
from opatlas.analyze.synthetic import synthetic_trace
from opatlas.cli import main
from opatlas.errors import OpatlasError

pytest.importorskip("torch")
from analyze_trace_helpers import transformer_trace

GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul"}


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return transformer_trace(tmp_path_factory.mktemp("trace") / "block.json")


def _busy_by_hand(events: list[dict]) -> float:
    """Summed duration of each thread's top-level operator events (µs)."""
    total = 0.0
    by_thread: dict = {}
    for e in events:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for evs in by_thread.values():
        end = -math.inf
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            if e["ts"] >= end:
                total += e["dur"]
                end = e["ts"] + e["dur"]
    return total


def test_real_trace_gemm_flops_and_total_time(trace):
    a = api.analyze(trace)
    doc = json.loads(trace.read_text())
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    assert a.source.kind == "trace"
    assert a.rows["time_s"].sum() == pytest.approx(_busy_by_hand(ops) * 1e-6, rel=1e-6)
    assert a.total_time_s == pytest.approx(a.rows["time_s"].sum(), rel=1e-9)
    gemm_rows = a.rows[a.rows["name"].isin(GEMMS)]
    assert len(gemm_rows) >= 8
    for _, r in gemm_rows.iterrows():
        s = r["shape"]
        per_call = 2.0 * s["batch"] * s["M"] * s["K"] * s["N"]
        bias = s["batch"] * s["M"] * s["N"] if r["name"] in ("aten::linear", "aten::addmm") else 0
        assert r["flops"] == pytest.approx(r["calls"] * (per_call + bias)), r["name"]
    # the block's four linears, by hand from its sizes: M = batch x seq = 64 rows
    fwd = gemm_rows[(gemm_rows["pass"] == "fwd") & (gemm_rows["name"] == "aten::linear")]
    assert sorted((s["M"], s["K"], s["N"]) for s in fwd["shape"]) == \
        sorted([(64, 64, 192), (64, 64, 64), (64, 64, 256), (64, 256, 64)])
    # the backward's GEMMs are mm calls under the autograd engine, labelled bwd
    bwd = gemm_rows[gemm_rows["pass"] == "bwd"]
    assert set(bwd["name"]) >= {"aten::mm", "aten::bmm"}
    assert {"attention", "layernorm", "softmax", "gelu", "other"} <= set(a.rows["op"])


def test_every_mm_event_is_counted_once(trace):
    """The mm rows' calls equal the trace's aten::mm events that no mapped op encloses."""
    a = api.analyze(trace)
    doc = json.loads(trace.read_text())
    mm = [e for e in doc["traceEvents"] if e.get("name") == "aten::mm"]
    rows = a.rows[a.rows["name"] == "aten::mm"]
    assert rows["calls"].sum() == len(mm)  # this block's mm calls are all backward GEMMs


def test_gpu_trace_attributes_kernels_to_their_launching_op(tmp_path):
    truth = synthetic_trace(tmp_path / "t.json.gz", events=3000)
    a = api.analyze(tmp_path / "t.json.gz")
    assert a.total_time_s == pytest.approx(truth["busy_us"] * 1e-6)
    assert a.rows["time_s"].sum() == pytest.approx(truth["busy_us"] * 1e-6)
    lin = a.rows[a.rows["op"] == "linear"]
    assert lin["time_s"].sum() == pytest.approx(truth["kernel_us"]["aten::linear"] * 1e-6)
    assert a.summary["device"] == "H100-SXM5-80GB"  # from the trace's deviceProperties
    qkv = lin[lin["shape"].map(lambda s: s["N"] == 12288)].iloc[0]
    assert qkv["flops"] == pytest.approx(qkv["calls"] * (2.0 * 16384 * 4096 * 12288
                                                         + 16384 * 12288))
    assert qkv["orojenesis_bytes"] > 0 and qkv["limiter"] == "compute"
    assert 1.0 <= qkv["headroom"] < 2.0


def test_unattributed_kernels_stay_as_other_rows(tmp_path):
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 2, "dur": 3, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "gemm_k", "pid": 0, "tid": 7, "ts": 20, "dur": 40,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "nccl_k", "pid": 0, "tid": 8, "ts": 20, "dur": 60,
         "args": {"correlation": 99}}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    a = api.analyze(path)
    assert a.total_time_s == pytest.approx(100e-6)
    by = {r["op"]: r for r in a.rows.to_dict("records")}
    assert by["mm"]["time_s"] == pytest.approx(40e-6)
    assert by["mm"]["flops"] == 2 * 4 * 8 * 16
    assert by["other"]["time_s"] == pytest.approx(60e-6) and by["other"]["name"] == "kernel nccl_k"


def _fails(capsys, tmp_path, path: Path, *extra: str) -> str:
    out = tmp_path / "r.html"
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(path), "--html", str(out), *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(path) in err
    assert not out.exists()
    return err


def test_bad_traces_exit_2_with_one_paragraph(capsys, tmp_path, trace):
    cut = tmp_path / "cut.json"
    cut.write_text(trace.read_text()[:5000])
    assert "truncated" in _fails(capsys, tmp_path, cut)
    junk = tmp_path / "junk.json"
    junk.write_text('{"traceEvents": [1, 2')
    assert "not valid JSON" in _fails(capsys, tmp_path, junk, "--kind", "trace")
    badgz = tmp_path / "t.json.gz"
    badgz.write_bytes(gzip.compress(trace.read_bytes())[:300])
    assert "gzip" in _fails(capsys, tmp_path, badgz)
    noshape = tmp_path / "noshape.json"
    doc = json.loads(trace.read_text())
    for e in doc["traceEvents"]:
        (e.get("args") or {}).pop("Input Dims", None)
    noshape.write_text(json.dumps(doc))
    assert "record_shapes=True" in _fails(capsys, tmp_path, noshape)
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello")
    assert "cannot tell what this is" in _fails(capsys, tmp_path, unknown)
    assert "no such file" in _fails(capsys, tmp_path, tmp_path / "missing.json")


def test_gzip_and_plain_give_the_same_rows(tmp_path, trace):
    gz = tmp_path / "block.json.gz"
    gz.write_bytes(gzip.compress(trace.read_bytes()))
    a, b = api.analyze(trace), api.analyze(gz)
    assert a.rows.drop(columns=["shape"]).equals(b.rows.drop(columns=["shape"]))
    with pytest.raises(OpatlasError, match="needs a training config"):
        api.write_trace(a, tmp_path / "x.json")
