"""opatlas analyze, review s38: communication bounds on the link the ranks cross; --strict
refusing a trace's empirical peaks; store progress after a moment whatever its size; the
memory's pipeline stage named; one list of --kind names for the help and the error."""

from __future__ import annotations

import itertools
import json
import time

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.analyze import api
from opatlas.analyze.sources import kinds
from opatlas.analyze.sources import store as store_src
from opatlas.analyze.tables import summary_items
from opatlas.cli import analyze_cmd
from opatlas.devices import get_device
from opatlas.ops.batch import batch_counts
from opatlas.store import Store
from opatlas.store.db import ResultRow

# llama2-70b: dp8 tp8 pp4 on 8-GPU nodes, bf16, micro-batch 1, seq 4096, hidden 8192
P2P_BYTES = 2 * 1 * 4096 * 8192 / 8  # one layer's activation over tp: 8,388,608 B a call
SETS = ["cluster.inter_bw_gbps=25", "cluster.intra_bw_gbps=400", "parallel.dp_overlap=false"]


def _comm(sets: list[str]) -> pd.DataFrame:
    a = api.analyze("llama2-70b", extra={"sets": sets})
    rows = a.rows[a.rows["limiter"] == "communication"]
    return rows.set_index(rows["op"] + "/" + rows["category"])


# ------------------------------------------------ 1. bounds on the link the ranks cross

def test_a_p2p_between_nodes_is_bounded_by_the_network():
    rows = _comm(SETS)
    p2p = rows.loc["p2p/p2p"]
    assert p2p["shape"]["bytes"] == P2P_BYTES == 8_388_608
    # neighbouring stages are tp·dp = 64 ranks apart: on another node, over the 25 GB/s network
    assert p2p["bound_time_s"] == pytest.approx(p2p["calls"] * 8_388_608 / 25e9, rel=1e-12)
    assert p2p["headroom"] == pytest.approx(p2p["time_s"] / p2p["bound_time_s"])
    assert 1.0 <= p2p["headroom"] < 1.1  # the estimate is that bound plus the latency


def test_a_data_parallel_ring_across_nodes_is_bounded_by_its_rail():
    rs = _comm(SETS).loc["reduce_scatter/dp_comm"]
    # dp 8 ranks spaced tp = 8 apart: one a node, one rail each at 25 GB/s; (n-1)/n of the
    # gradients (bf16 grads would be 2 B/param; the row's bytes are what it moves)
    assert rs["bound_time_s"] == pytest.approx(7 / 8 * rs["bytes"] / 25e9, rel=1e-12)
    assert rs["headroom"] == pytest.approx(rs["time_s"] / rs["bound_time_s"])


def test_groups_within_a_node_keep_the_intra_node_link():
    rows = _comm(SETS)
    ar = rows.loc["all_reduce/tp_comm"]  # tp 8 in one node: 2(n-1)/n of the message on NVLink
    assert ar["bound_time_s"] == pytest.approx(
        ar["calls"] * 2 * 7 / 8 * ar["shape"]["bytes"] / 400e9, rel=1e-12)
    # the whole job in one node: the same p2p at the intra-node link, 400/25 = 16x less
    one_node = _comm([*SETS, "cluster.gpus_per_node=256"]).loc["p2p/p2p"]
    assert rows.loc["p2p/p2p", "bound_time_s"] / one_node["bound_time_s"] == pytest.approx(16)


# ------------------------------------------------ 2. --strict refuses empirical peaks

def _cpu_trace(path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100 * i,
           "dur": d, "args": {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float"] * 2}}
          for i, d in enumerate((20, 40))]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_strict_refuses_a_cpu_traces_empirical_peaks(capsys, tmp_path):
    trace = str(_cpu_trace(tmp_path / "cpu.json"))
    code, _, err = cli_in_process(capsys, "analyze", trace, "--json")
    assert code == 0 and "peaks are empirical" in err  # said, without --strict
    code, _, err = cli_in_process(capsys, "analyze", trace, "--strict", "--json")
    line = one_error(code, err, trace, "not in the catalog", "--strict", "--device NAME",
                     "H100-SXM5-80GB")
    assert "a CPU trace" in line
    code, out, _ = cli_in_process(capsys, "analyze", trace, "--strict", "--json",
                                  "--device", "H100")
    assert code == 0 and json.loads(out)["summary"]["device"] == "H100-SXM5-80GB"


# ------------------------------------------------ 3. store progress after a moment

def _store(path) -> int:
    shapes = pd.DataFrame([{"role": "qkv", "mp": 1, "b": b, "l": l, "dim": d}
                           for b, l, d in itertools.product((1, 2), (512, 1024, 2048),
                                                            (1024, 2048, 4096))])
    c = batch_counts("linear", shapes.assign(dtype="fp16"))
    dev = get_device("A100")
    seconds = 1.25 * np.maximum(c["flops_fwd"] / dev.peak("fp16"), c["bytes_fwd"] / dev.bandwidth)
    with Store(path) as st:
        st.add_results([ResultRow(f"v{i}", "linear", json.dumps({**s, "dtype": "fp16"}), "fwd",
                                  "cuda", "A100", "fp16", "ok", repeats=5,
                                  median_ns=float(t) * 1e9, flops=float(f), min_bytes=float(b))
                        for i, (s, t, f, b) in enumerate(zip(
                            shapes.to_dict("records"), seconds, c["flops_fwd"], c["bytes_fwd"],
                            strict=True))])
    return len(shapes)


def test_a_small_store_shows_progress_on_stderr_once_it_lasts(capsys, tmp_path, monkeypatch):
    n = _store(tmp_path / "s.duckdb")
    assert n == 18  # far below the pool's 4,000 rows
    monkeypatch.setattr(store_src._LateProgress, "DELAY", 60.0)
    code, quick, err = cli_in_process(capsys, "analyze", str(tmp_path / "s.duckdb"), "--json")
    assert code == 0 and "held-out fits" not in err  # quick: nothing said
    monkeypatch.setattr(store_src._LateProgress, "DELAY", 0.0)
    code, out, err = cli_in_process(capsys, "analyze", str(tmp_path / "s.duckdb"), "--json")
    assert code == 0 and json.loads(out)["rows"] == json.loads(quick)["rows"]  # stdout clean
    said = [ln for ln in err.splitlines() if "held-out fits (s.duckdb)" in ln]
    assert said and f"{n}/{n}=100.00%" in said[-1]


def test_progress_shows_while_one_long_step_runs(capsys, monkeypatch):
    monkeypatch.setattr(store_src._LateProgress, "DELAY", 0.05)
    with store_src._progress(2000, "held-out fits (big.duckdb)", "rows") as bar:
        bar.advance("ok", 500)
        time.sleep(0.5)  # no step ends, yet the timer has said where it stands
        said = capsys.readouterr().err
        bar.advance("ok", 1500)
    assert "held-out fits (big.duckdb): 500 of 2,000 rows done after 0 s" in said
    assert "2000/2000=100.00%" in capsys.readouterr().err


# ------------------------------------------------ 4. the memory's stage named

def test_the_memory_names_its_stage_beside_another_stages_rows(tmp_path):
    a = api.analyze("llama2-70b")
    assert a.summary["stage"] == 3 and a.summary["memory_stage"] == 0
    assert set(a.rows["group"]) == {3}
    labels = dict((label, value) for label, value, _ in summary_items(a))
    want = "memory per GPU (GiB), pipeline stage 0 (the fullest; the rows are stage 3)"
    assert labels[want] == f"{a.summary['memory_gib']:.2f}"
    kept = api.analyze(a.save(tmp_path / "a.json"))  # the same after --save, --load
    assert kept.summary["memory_stage"] == 0
    assert want in [label for label, _, _ in summary_items(kept)]
    one = api.analyze("llama2-7b")  # pp 1: one stage, nothing to name
    assert one.summary["memory_stage"] == 0 and one.summary["stages"] == 1
    assert "memory per GPU (GiB)" in [label for label, _, _ in summary_items(one)]


# ------------------------------------------------ 5. one list of kinds

def test_the_help_and_the_kind_error_list_the_registered_kinds(capsys, tmp_path):
    assert set(analyze_cmd.KINDS) == set(kinds())  # the readers' registry, every kind
    code, out, _ = cli_in_process(capsys, "analyze", "--help")
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0
    for name in analyze_cmd.KINDS:
        assert f"{name} (" in flat, name
    code, _, err = cli_in_process(capsys, "analyze", "llama2-7b", "--kind", "bogus")
    one_error(code, err, "unknown --kind 'bogus'; known: config, store, trace, pybuda, "
                         "ttmetal, analysis")
    saved = api.analyze("llama2-7b").save(tmp_path / "a.json")  # analysis: a real kind
    code, out, err = cli_in_process(capsys, "analyze", str(saved), "--kind", "analysis",
                                    "--json")
    assert code == 0, err
    assert json.loads(out)["source"]["kind"] == "config"


def test_each_data_parallel_group_is_bounded_on_its_own_links():
    """mixtral-8x7b, ep 4 (dp 8, tp 4, 8-GPU nodes, 450/50 GB/s): the dense gradients over dp 8
    spaced tp = 4 apart (2 a node: two rails, 100 GB/s), the experts' over dp/ep = 2 spaced
    tp·ep = 16 apart (one a node: one rail, 50 GB/s). Bytes as test_estimate_followups
    derives them (busiest device, 2 B a parameter)."""
    a = api.analyze("mixtral-8x7b", extra={"sets": ["parallel.ep=4", "parallel.dp_overlap=false"]})
    rs = a.rows[a.rows["category"] == "dp_comm"].set_index("op").loc["reduce_scatter"]
    dense, experts = 2 * 116_786_176, 2 * 704_643_072
    assert rs["bytes"] == dense + experts
    want = 7 / 8 * dense / 100e9 + 1 / 2 * experts / 50e9
    assert want == pytest.approx(0.01613661952, rel=1e-12)
    assert rs["bound_time_s"] == pytest.approx(want, rel=1e-12)
