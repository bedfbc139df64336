"""The config source: rows are the estimator's items (same times, summing to the step time),
with bounds checked by hand, and --measured replacing predictions from a store."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from conftest import REPO
from opatlas.analyze import api
from opatlas.bounds import frontier, gemm
from opatlas.cli import main
from opatlas.devices import get_device
from opatlas.estimate import estimate_step, load_config
from opatlas.store import Store
from opatlas.store.db import ResultRow

CONFIG = "llama2-7b"  # analytical ops: fast, no model fitting


@pytest.fixture(scope="module")
def analysis():
    return api.analyze(CONFIG)


def _cli_json(capsys, *args: str) -> dict:
    with pytest.raises(SystemExit) as exc:
        main([*args])
    assert exc.value.code in (0, None)
    return json.loads(capsys.readouterr().out)


def test_cli_json_rows_sum_to_the_estimates_step_and_match_its_items(capsys):
    est = _cli_json(capsys, "estimate", CONFIG, "--json")
    ana = _cli_json(capsys, "analyze", CONFIG, "--json")
    assert set(ana) >= {"source", "summary", "rows"}
    assert ana["source"] == {"kind": "config", "path": CONFIG}
    total = sum(r["time_s"] for r in ana["rows"])
    assert total == pytest.approx(est["step_time_s"], rel=1e-12)
    assert ana["summary"]["total_time_s"] == pytest.approx(est["step_time_s"], rel=1e-12)
    assert [(r["op"], r["pass"], r["calls"]) for r in ana["rows"]] == \
        [(i["name"], i["pass"], i["calls"]) for i in est["items"]]
    assert [r["time_s"] for r in ana["rows"]] == pytest.approx([i["time_s"] for i in est["items"]],
                                                               rel=1e-12)
    for r in ana["rows"]:
        assert {"op", "pass", "calls", "time_s", "flops", "bytes", "bound_time_s", "limiter",
                "shape"} <= set(r)
        assert isinstance(r["shape"], dict)


def test_gemm_bounds_by_hand(analysis):
    dev = get_device("H100")
    row = analysis.rows[(analysis.rows["op"] == "linear1") & (analysis.rows["pass"] == "fwd")].iloc[0]
    b, m, k, n = row["gemm"]
    assert b == 1 and k == 4096  # tokens x hidden -> q, k, v of one TP shard
    words = frontier(gemm(m, k, n, 2)).lookup(dev.onchip_bytes / 2)
    assert row["orojenesis_bytes"] == pytest.approx(row["calls"] * words * 2)
    flops = 2.0 * m * k * n
    assert row["flops"] == pytest.approx(row["calls"] * flops, rel=1e-9)
    compute_s = row["flops"] / dev.peak("bf16")
    assert row["bound_time_s"] == pytest.approx(max(compute_s, row["bytes"] / dev.bandwidth,
                                                    row["orojenesis_bytes"] / dev.bandwidth))
    assert row["headroom"] == pytest.approx(row["time_s"] / row["bound_time_s"])
    # analytical mode: a GEMM runs at 70% of peak compute, so 1/0.7 of its compute bound
    assert row["headroom"] == pytest.approx(1 / 0.7, rel=1e-6)
    assert row["limiter"] == "compute"
    assert row["util_compute"] == pytest.approx(0.7, rel=1e-6)
    assert row["util"] == row["util_compute"]


def test_util_is_the_binding_resources(analysis):
    """Analytical mode runs memory-bound ops at 80% of the bandwidth: their util is that, not
    their (tiny) share of the FLOP peak."""
    rows = analysis.rows
    norm = rows[(rows["op"] == "RMSlayernorm") & (rows["pass"] == "fwd")].iloc[0]
    assert norm["limiter"] == "memory"
    assert norm["util"] == pytest.approx(0.8, rel=1e-6) == norm["util_memory"]
    assert norm["util_compute"] < 0.05


def test_every_row_has_a_limiter_and_collectives_a_bandwidth_bound(analysis):
    rows = analysis.rows
    assert rows["limiter"].isin(["compute", "memory", "communication", "bubble", "overhead"]).all()
    comm = rows[rows["category"] == "tp_comm"].iloc[0]
    n, nbytes = comm["shape"]["ranks"], comm["shape"]["bytes"]
    link = load_config(CONFIG).cluster.intra_bw_gbps * 1e9
    assert comm["bound_time_s"] == pytest.approx(comm["calls"] * 2 * (n - 1) / n * nbytes / link)
    assert comm["limiter"] == "communication" and comm["headroom"] >= 1
    # the sequence-parallel re-gather: its shape's bytes are one call's, like the all-reduce's
    (gather,) = rows[(rows["op"] == "all_gather") & (rows["category"] == "tp_comm")].itertuples()
    assert gather.shape["role"] == "sequence-parallel re-gather"
    assert gather.bytes == pytest.approx(gather.calls * gather.shape["bytes"])
    assert gather.bound_time_s == pytest.approx(gather.bytes * (n - 1) / n / link)
    assert 1 <= gather.headroom < 2  # the same links as the all-reduce's
    # data-parallel rows: the shape holds one pass over the gradients, one bucket a call
    for dp in rows[rows["category"] == "dp_comm"].itertuples():
        assert dp.bytes == pytest.approx(dp.calls / dp.shape["buckets"] * dp.shape["bytes"])


def test_pipeline_config_rows_are_the_slowest_stage_and_carry_the_schedule():
    a = api.analyze("llama2-70b")
    est = estimate_step(load_config("llama2-70b"))
    assert a.rows["time_s"].sum() == pytest.approx(est.step_time_s, rel=1e-12)
    stage = a.rows["group"].iloc[0]
    assert (a.rows["group"] == stage).all()
    assert stage == est.config.parallel.pp - 1  # the head makes the last stage the slowest
    blocks = a.summary["timeline"]
    assert {b["stage"] for b in blocks} == set(range(est.config.parallel.pp))
    span = max(b["start_s"] + b["dur_s"] for b in blocks) - min(b["start_s"] for b in blocks)
    assert span == pytest.approx(est.step_time_s, rel=0.01)


def _store_with(path, est, op: str, pass_: str, seconds: float, device: str = "H100"):
    item = next(i for i in est.items if i.name == op and i.pass_ == pass_)
    params = {**dict(item.shape), "dtype": "bf16"}
    with Store(path) as st:
        st.add_results([ResultRow("v1", op, json.dumps(params), pass_, "cuda", device, "bf16",
                                  "ok", repeats=5, median_ns=seconds * 1e9)])
    return item


def test_measured_replaces_the_prediction_and_shows_the_error(tmp_path):
    est = estimate_step(load_config(CONFIG))
    item = _store_with(tmp_path / "m.duckdb", est, "linear3", "fwd", 2e-3,
                       device="NVIDIAH10080GBHBM3")
    a = api.analyze(CONFIG, measured=tmp_path / "m.duckdb")
    r = a.rows[(a.rows["op"] == "linear3") & (a.rows["pass"] == "fwd")].iloc[0]
    predicted = item.time_s
    assert r["time_s"] == pytest.approx(2e-3 * item.calls)
    assert r["predicted_time_s"] == pytest.approx(predicted)
    assert r["error"] == pytest.approx((predicted - 2e-3 * item.calls) / (2e-3 * item.calls))
    others = a.rows[a.rows["measured_time_s"].isna()]
    assert (others["error"].isna()).all()
    assert a.rows["time_s"].sum() == pytest.approx(a.total_time_s)
    assert any(c.key == "error" for c in a.columns)
    assert a.summary["estimation_error"] == pytest.approx(r["error"])


def test_measured_on_another_device_is_not_used_and_is_said(tmp_path):
    est = estimate_step(load_config(CONFIG))
    _store_with(tmp_path / "m.duckdb", est, "linear3", "fwd", 2e-3, device="A100")
    a = api.analyze(CONFIG, measured=tmp_path / "m.duckdb")
    assert a.rows["measured_time_s"].isna().all()
    assert a.total_time_s == pytest.approx(est.step_time_s)
    assert any("no measurement matches" in n for n in a.summary["notes"])
    from opatlas.errors import OpatlasError

    with pytest.raises(OpatlasError, match="no measurement matches"):
        api.analyze(CONFIG, measured=tmp_path / "m.duckdb", strict=True,  # defaults stated:
                    extra={"sets": ["model.attention=flash", "parallel.dp_overlap=true",
                                    "parallel.bucket_mb=25", "cluster.intra_latency_us=5",
                                    "cluster.inter_latency_us=10"]})


def test_bubble_follows_the_measured_stage_time(tmp_path):
    est = estimate_step(load_config("llama2-70b"))
    item = _store_with(tmp_path / "m.duckdb", est, "linear3", "bwd",
                       2 * next(i.time_per_call_s for i in est.items
                                if i.name == "linear3" and i.pass_ == "bwd"))
    a = api.analyze("llama2-70b", measured=tmp_path / "m.duckdb")
    rows = a.rows
    stage = rows["category"].isin(["compute", "tp_comm", "ep_comm", "p2p"])
    before = rows.loc[stage, "predicted_time_s"].sum()
    after = rows.loc[stage, "time_s"].sum()
    assert after == pytest.approx(before + item.time_s)
    bubble = rows[rows["category"] == "pp_bubble"].iloc[0]
    assert bubble["time_s"] == pytest.approx(bubble["predicted_time_s"] * after / before)
    assert not math.isnan(bubble["time_s"])
    assert isinstance(rows, pd.DataFrame)


def test_unfused_attention_with_dropout_has_its_rows_and_bounds(tmp_path):
    """A Selene config (unfused attention, dropout 0.1) in analytical mode: the dropout is a
    catalog op, so its rows carry the memory traffic of b·(a/t)·s² probabilities, 5 bytes
    each in fp16, and the rows still sum to the step."""
    text = (REPO / "examples" / "validation" / "gpt-1.7b.yml").read_text()
    path = tmp_path / "gpt.yml"
    path.write_text(text.replace("ops: {mode: data, data: bundled}", "ops: {mode: analytical}"))
    a = api.analyze(path)
    est = estimate_step(load_config(path))
    assert a.rows["time_s"].sum() == pytest.approx(est.step_time_s, rel=1e-12)
    drop = a.rows[a.rows["op"] == "attention_dropout"].set_index("pass")
    assert set(drop.index) == {"fwd", "bwd", "recompute"}
    per_call = 16 * 24 * 2048 * 2048 * 5  # b · heads/tp · s² · (2 + 2 + 1) bytes: mb 16, 24 heads
    assert drop.loc["fwd", "bytes"] == pytest.approx(drop.loc["fwd", "calls"] * per_call)
    assert drop.loc["fwd", "limiter"] == "memory"
