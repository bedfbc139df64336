"""The estimated step laid out in time and exported for Perfetto: schedule orders by hand,
the span equal to the step time, blocks that nest or follow each other on every thread."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest

from opatlas.analyze.perfetto import write_trace
from opatlas.analyze.timeline import schedule_order, span_s, step_timeline
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate.config import TrainConfig


def _cfg(name: str, **parallel) -> TrainConfig:
    c = load_config(name)
    data = c.model_dump()
    data["parallel"].update(parallel)
    data["ops"]["mode"] = "analytical"
    data["cluster"]["nccl_data"] = None
    return TrainConfig.model_validate(data)


def _names(order):
    return [f"{'F' if k == 'fwd' else 'B'}{mb}" + (f".{c}" if c else "") for k, mb, c in order]


def test_schedule_orders_by_hand():
    assert _names(schedule_order("gpipe", 3, 2, 1, 0)) == ["F0", "F1", "B0", "B1"]
    assert _names(schedule_order("1f1b", 4, 6, 1, 0)) == \
        ["F0", "F1", "F2", "F3", "B0", "F4", "B1", "F5", "B2", "B3", "B4", "B5"]
    assert _names(schedule_order("1f1b", 4, 6, 1, 3)) == \
        ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3", "F4", "B4", "F5", "B5"]
    # interleaved, 2 stages x 2 chunks, 4 micro-batches: forwards in groups of 2 per chunk,
    # stage 0 warms up with (2 - 0 - 1)·2 + (2 - 1)·2 = 4 forwards
    assert _names(schedule_order("interleaved", 2, 4, 2, 0)) == \
        ["F0", "F1", "F0.1", "F1.1", "F2", "B0.1", "F3", "B1.1", "F2.1", "B0", "F3.1", "B1",
         "B2.1", "B3.1", "B2", "B3"]


@pytest.mark.parametrize("parallel", [
    {"schedule": "gpipe", "virtual_stages": 1, "pp": 4, "dp": 2, "tp": 8},
    {"schedule": "1f1b", "virtual_stages": 1, "pp": 4, "dp": 2, "tp": 8, "zero": 3},
    {"schedule": "interleaved", "virtual_stages": 2, "pp": 4, "dp": 2, "tp": 8},
    {"schedule": "1f1b", "virtual_stages": 1, "pp": 1, "dp": 8, "tp": 8}])
def test_span_is_the_step_time_and_threads_nest(parallel):
    est = estimate_step(_cfg("llama2-70b", **parallel))
    blocks = step_timeline(est)
    assert span_s(blocks) == pytest.approx(est.step_time_s, rel=1e-9)
    threads = defaultdict(list)
    for b in blocks:
        threads[(b.stage, b.lane)].append(b)
    for bs in threads.values():
        bs.sort(key=lambda b: (b.start_s, b.depth))
        open_ = []  # the enclosing block, if any
        for b in bs:
            while open_ and b.start_s >= open_[-1].end_s - 1e-12:
                open_.pop()
            if open_:  # inside a parent: must end inside it
                assert b.end_s <= open_[-1].end_s + 1e-12
            open_.append(b)
    # each micro-batch's forward on stage 0 appears once per chunk
    v = parallel["virtual_stages"] if parallel["schedule"] == "interleaved" else 1
    fwd0 = [b for b in blocks if b.stage == 0 and b.depth == 0 and b.kind == "fwd"]
    assert len(fwd0) == est.config.micro_batches * v


def test_gpipe_bubble_by_hand():
    """GPipe on p stages: the last stage ends its m forwards after m + p − 1 forward times;
    the first micro-batch's backward then passes back through p − 1 stages to stage 0."""
    est = estimate_step(_cfg("llama2-70b", schedule="gpipe", virtual_stages=1, pp=4, dp=2, tp=8))
    blocks = [b for b in step_timeline(est) if b.depth == 0 and b.stage == 0]
    f = next(b.dur_s for b in blocks if b.kind == "fwd")
    b_ = next(b.dur_s for b in blocks if b.kind == "bwd")
    first_bwd = min(b.start_s for b in blocks if b.kind == "bwd")
    m = est.config.micro_batches
    assert first_bwd == pytest.approx((m + 3) * f + 3 * b_)


def test_interleaved_needs_micro_batches_in_groups_of_pp():
    with pytest.raises(ValueError, match=r"micro-batches per step \(12\) to be a multiple of pp"):
        c = _cfg("llama2-70b", schedule="interleaved", virtual_stages=2, pp=8, dp=1, tp=8)
        data = c.model_dump()
        data["training"]["global_batch"] = 12
        TrainConfig.model_validate(data)


def test_perfetto_trace(tmp_path):
    est = estimate_step(_cfg("llemma_7b_4_2_2_P"))
    path = write_trace(est, tmp_path / "step.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ev = doc["traceEvents"]
    procs = {e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert procs == {f"pipeline stage {d}" for d in range(est.config.parallel.pp)}
    threads = {e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert {"compute", "TP comm", "DP comm", "p2p"} <= threads
    xs = [e for e in ev if e["ph"] == "X"]
    t0 = min(e["ts"] for e in xs)
    t1 = max(e["ts"] + e["dur"] for e in xs)
    assert (t1 - t0) / 1e6 == pytest.approx(est.step_time_s, rel=0.01)
    fwd_ops = {e["name"] for e in xs if e["args"]["kind"] == "fwd" and e["cat"] == "compute"}
    assert {"linear1", "flash_atten", "linear4"} <= fwd_ops
