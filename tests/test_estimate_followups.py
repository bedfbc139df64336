"""Follow-ups on estimated collectives and their bounds: an all-gather's NCCL samples are read
as each rank's input, a reduce-scatter without samples is half the all-reduce (said once, in one
place), a MoE's expert gradients are bounded over the dp/ep ranks that reduce them,
``--analytical`` says nothing of the data it drops, and its util/headroom note is exact."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.analyze import api
from opatlas.analyze.sources.config import analytical_note
from opatlas.analyze.why import Peaks, explain
from opatlas.estimate.comm import REDUCE_SCATTER_RULE, Measured, take_derived_note
from opatlas.estimate.config import ClusterConfig
from opatlas.samples import bundled_dataset

A100 = "NVIDIAA100-SXM4-80GB"


def _csv(folder: Path, stem: str, rows: list[tuple[int, float]], nodes: int = 1,
         gpn: int = 2) -> None:
    lines = ["shape,nodes,GPUsPerNode,dur(us)"] + [f"{s},{nodes},{gpn},{us}" for s, us in rows]
    (folder / f"X_{stem}_fp16_{nodes}_{gpn}.csv").write_text("\n".join(lines) + "\n")


# ------------------------------------------------ 1. all-gather bytes, reduce-scatter rule

def test_an_allgather_sample_is_one_ranks_input_and_a_reduce_scatter_half_the_allreduce(
        tmp_path):
    _csv(tmp_path, "allreduce", [(1_000_000, 100.0), (2_000_000, 200.0)])
    _csv(tmp_path, "allgather_large", [(1_000_000, 300.0), (2_000_000, 600.0)])
    comm = Measured(ClusterConfig(), tmp_path, "X")
    # 2 ranks gathering 2e6 fp16 elements each: 8e6 bytes in all, the 600 µs sample (read as
    # the total, 8e6 bytes was twice the largest sample: 1,200 µs)
    gather = comm.time_topology("all_gather", np.array([8e6]), 1, 2, True)[0]
    assert gather == pytest.approx(600e-6, rel=1e-12)
    scatter = comm.time_topology("reduce_scatter", np.array([4e6]), 1, 2, True)[0]
    assert scatter == pytest.approx(100e-6, rel=1e-12)  # half the 200 µs all-reduce of 4e6 B
    assert take_derived_note(comm) == (
        f"no reduce-scatter samples in {tmp_path} for 1×2 (nodes × GPUs per node): "
        f"reduce_scatter is timed as {REDUCE_SCATTER_RULE}")
    assert take_derived_note(comm) is None  # said once
    assert not comm.fallbacks


def test_a_message_below_every_sample_scales_down_to_the_rings_latency(tmp_path):
    """Below the smallest sample, alpha-beta with that sample's bandwidth: the ring's latency
    steps plus the sample's transfer time scaled by the size (it had been the whole
    sample's time, whatever the size)."""
    _csv(tmp_path, "allreduce", [(1_000_000, 100.0), (2_000_000, 200.0)])
    _csv(tmp_path, "allgather_large", [(1_000_000, 300.0), (2_000_000, 600.0)])
    cluster = ClusterConfig(intra_latency_us=2.0)
    comm = Measured(cluster, tmp_path, "X")
    # all-reduce on 2 ranks: 2(n−1) = 2 latency steps of 2 µs; smallest sample 2e6 B, 100 µs
    t = comm.time_topology("all_reduce", np.array([5e5, 0.0]), 1, 2, True)
    assert t == pytest.approx([4e-6 + (100e-6 - 4e-6) * 0.25, 4e-6], rel=1e-12)
    # all-gather: n−1 = 1 step; smallest sample 2 ranks x 2e6 B = 4e6 B, 300 µs
    t = comm.time_topology("all_gather", np.array([1e6]), 1, 2, True)[0]
    assert t == pytest.approx(2e-6 + (300e-6 - 2e-6) * 0.25, rel=1e-12)
    # the reduce-scatter taken from the all-reduce: its half, scaled the same way
    t = comm.time_topology("reduce_scatter", np.array([1e6]), 1, 2, True)[0]
    assert t == pytest.approx(2e-6 + (50e-6 - 2e-6) * 0.5, rel=1e-12)
    # inside the samples nothing changed
    t = comm.time_topology("all_reduce", np.array([2e6, 4e6]), 1, 2, True)
    assert t == pytest.approx([100e-6, 200e-6], rel=1e-12)


def test_across_nodes_the_bundled_allgathers_agree_with_half_the_allreduces():
    """The reading of the samples the two rules rest on: a ring all-gather and a ring
    reduce-scatter of S bytes move (n−1)/n·S, half an all-reduce's traffic; across nodes the
    bundled all-gathers take half the all-reduce's time once read as each rank's input
    (read as the total they took 2 to 8 times it)."""
    comm = Measured(ClusterConfig(), bundled_dataset() / "nccl", A100)
    size = np.array([1.8e9])
    for nodes, gpn in ((2, 1), (2, 2), (4, 1), (2, 4)):
        gather = comm.time_topology("all_gather", size, nodes, gpn, False)[0]
        scatter = comm.time_topology("reduce_scatter", size, nodes, gpn, False)[0]
        assert 0.8 < gather / scatter < 1.25, (nodes, gpn, gather, scatter)


def _loglog(x: float, x0: float, y0: float, x1: float, y1: float) -> float:
    w = math.log(x / x0) / math.log(x1 / x0)
    return math.exp(math.log(y0) + w * math.log(y1 / y0))


def test_llemma_zero1_gradients_and_parameters_golden_times(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llemma_7b_4_2_2_P", "--set",
                                    "parallel.zero=1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    dp = {it["name"]: it for it in doc["items"] if it["category"] == "dp_comm"}
    nbytes = 1_816_600_576.0  # 908,300,288 parameters on the busiest device, 16-bit
    assert dp["reduce_scatter"]["shape"]["bytes"] == dp["all_gather"]["shape"]["bytes"] == nbytes
    # the 1×2 CSVs' samples around the sizes (all-reduce of the whole buffer, 908.3 M
    # elements: 24.15-24.6 ms; all-gather of each rank's half, 454.15 M: 18.4-18.6 ms) are
    # noisy; the measured model's monotone median fit lies among them
    assert 24.15e-3 / 2 <= dp["reduce_scatter"]["time_s"] <= 24.6e-3 / 2
    assert 18.4e-3 <= dp["all_gather"]["time_s"] <= 18.6e-3  # not 37.9 ms
    assert dp["all_gather"]["time_s"] == pytest.approx(18.6e-3, rel=0.01)  # upstream's
    said = [n for n in doc["assumptions"] if "reduce-scatter samples" in n]
    assert len(said) == 1 and "for 1×2" in said[0] and REDUCE_SCATTER_RULE in said[0]
    assert f"note: {said[0]}" in err


# ------------------------------------------------ 2. MoE gradients over the expert dp group

def test_moe_expert_gradients_are_bounded_over_the_dp_over_ep_ranks():
    a = api.analyze("mixtral-8x7b", extra={"sets": ["parallel.ep=4",
                                                    "parallel.dp_overlap=false"]})
    rows = a.rows[a.rows["category"] == "dp_comm"].set_index("op")
    # busiest (last) device, tp 4, ep 4, 8 layers: dense 8·((41,943,040 + 32,768 router)/4 +
    # 8,192 norms) + the head's (4,096 + 32,000·4,096)/4 = 116,786,176 parameters, over dp 8;
    # experts 8 · 8·3·4,096·14,336/(4·4) = 704,643,072, over dp/ep = 2; 2 bytes each
    dense, experts = 2 * 116_786_176, 2 * 704_643_072
    bus_bytes = 7 / 8 * dense + 1 / 2 * experts  # 909,018,880 (all over dp 8: 1,437,501,184)
    assert bus_bytes == 909_018_880
    # the groups span nodes (8 GPUs each, 50 GB/s a rail): the dense one holds 2 ranks of a
    # node (stride tp 4), 2 rails; the experts' 2 ranks (stride tp·ep 16) sit on two nodes
    bound = 7 / 8 * dense / 100e9 + 1 / 2 * experts / 50e9
    for op in ("reduce_scatter", "all_gather"):
        assert rows.at[op, "bytes"] == dense + experts
        assert rows.at[op, "bound_time_s"] == pytest.approx(bound, rel=1e-12)


def test_experts_whose_group_is_one_rank_add_nothing_to_the_bound():
    a = api.analyze("mixtral-8x7b", extra={"sets": ["parallel.ep=8",
                                                    "parallel.dp_overlap=false"]})
    rows = a.rows[a.rows["category"] == "dp_comm"].set_index("op")
    experts = 2 * 8 * 8 * 3 * 4096 * 14336 / (4 * 8)  # one expert per rank: no dp traffic
    dense = rows.at["reduce_scatter", "bytes"] - experts
    assert dense == 2 * 116_786_176
    # dp 8 at stride tp 4 spans 4 nodes, 2 ranks (2 rails of 50 GB/s) on each
    assert rows.at["reduce_scatter", "bound_time_s"] == pytest.approx(7 / 8 * dense / 100e9,
                                                                      rel=1e-12)


# ------------------------------------------------ 3. --analytical: no word of dropped data

def _said(err: str, doc_notes: list[str]) -> list[str]:
    return [ln for ln in err.splitlines() if "note:" in ln] + doc_notes


def test_analytical_estimate_says_nothing_of_the_nccl_data(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llemma_7b_4_2_2_P", "--analytical",
                                    "--json")
    assert code == 0, err
    doc = json.loads(out)
    said = _said(err, doc["assumptions"] + doc["notes"])
    assert said and not [n for n in said if "NCCL" in n or "nccl" in n]
    links = [n for n in doc["assumptions"] if "dgx-a100 preset" in n]
    assert links == ["cluster links of the NVIDIAA100-SXM4-80GB's own system (dgx-a100 "
                     "preset): cluster.intra_bw_gbps = 300.0, cluster.inter_bw_gbps = 25.0; "
                     "--set cluster.KEY=VALUE to change"]


def test_analytical_analysis_says_nothing_of_the_nccl_data(capsys):
    code, out, err = cli_in_process(capsys, "analyze", "llemma_7b_4_2_2_P", "--analytical",
                                    "--json")
    assert code == 0, err
    assert not [n for n in _said(err, json.loads(out)["summary"]["notes"]) if "NCCL" in n]


def test_analytical_ett_config_drops_its_missing_data_folders_quietly(tmp_path, capsys):
    text = (bundled_dataset().parent / "configs" / "llemma_7b_4_2_2_P.yml").read_text()
    config = tmp_path / "ll.yml"
    config.write_text(text.replace("./regressors/Perlmutter/", "./nowhere/"))
    code, _, err = cli_in_process(capsys, "estimate", str(config), "--analytical")
    assert code == 0 and "data_folder" not in err and "NCCL" not in err, err
    code, _, err = cli_in_process(capsys, "estimate", str(config), "--analytical", "--strict",
                                  "--set", "ops.compute_efficiency=0.7",
                                  "--set", "ops.memory_efficiency=0.8",
                                  "--set", "cluster.intra_latency_us=5",
                                  "--set", "cluster.inter_latency_us=10")  # no default assumed
    assert code == 0 and "data_folder" not in err, err  # a folder it does not use
    code, _, err = cli_in_process(capsys, "estimate", str(config), "--strict")
    one_error(code, err, "nccl_data_folder", "./nowhere/nccl")  # data mode still refuses


# ------------------------------------------------ 4. what util and headroom are, exactly

def test_analytical_note_says_where_util_and_headroom_are_the_factors():
    note = analytical_note(0.7, 0.8)
    assert note.startswith("ops timed by the roofline at 0.7 of peak compute and 0.8 of the "
                           "bandwidth (ops.mode: analytical), not measured")
    # the old note ended at "their util and headroom are those factors, not measurements"
    assert ("their util and headroom are those factors (util the factor of the side, compute "
            "or memory, that sets an op's time; headroom its inverse) only where that side's "
            "roof is also the op's bound") in note
    assert ("where a GEMM's Orojenesis traffic is the bound and memory sets the time, util is "
            "the memory factor and headroom less than its inverse (the time over that traffic "
            "at the full bandwidth)") in note
    assert ("where the other side sets the bound (its roof, or that traffic), util is that "
            "side's achieved share of its peak and headroom the time over the bound") in note
    a = api.analyze("llemma_7b_4_2_2_P", extra={"analytical": True})
    assert note in a.summary["notes"]


def _explained(gemm: tuple[int, int, int, int] | None, flops: float, nbytes: float,
               peaks: Peaks) -> pd.Series:
    """One op timed as ``--analytical`` times it (the roofline at 0.7 and 0.8), explained."""
    t = max(flops / (0.7 * peaks.flops_s), nbytes / (0.8 * peaks.bytes_s))
    rows = pd.DataFrame([{"op": "x", "pass": "fwd", "time_s": t, "calls": 1.0, "flops": flops,
                          "bytes": nbytes, "gemms": [gemm] if gemm else None, "limiter": None}])
    return explain(rows, peaks).iloc[0]


@pytest.mark.parametrize("case", ["roof", "orojenesis, same side", "orojenesis, other side"])
def test_the_note_holds_in_each_of_its_cases(case):
    if case == "roof":  # memory sets time and bound: util 0.8, headroom 1/0.8
        r = _explained(None, 1e3, 1e6, Peaks("p", 1e14, 1e12, 0.0))
        assert (r["limiter"], r["util"]) == ("memory", pytest.approx(0.8))
        assert r["headroom"] == pytest.approx(1 / 0.8)
    elif case == "orojenesis, same side":  # a GEMV at a 64-byte buffer: 9,344 B of traffic
        r = _explained((1, 1, 64, 64), 8192.0, 8448.0, Peaks("p", 1e14, 1e12, 64.0))
        assert r["orojenesis_bytes"] == 9344.0 and r["limiter"] == "memory"
        assert r["util"] == pytest.approx(0.8)
        assert r["headroom"] == pytest.approx(8448 / 0.8 / 9344)  # 1.13, under 1/0.8
    else:  # compute sets the time (0.7), the GEMM's traffic the bound: memory's share
        r = _explained((1, 64, 64, 64), 524288.0, 24576.0, Peaks("p", 4e12, 1e12, 256.0))
        t = 524288 / (0.7 * 4e12)
        assert r["orojenesis_bytes"] == 139264.0 and r["limiter"] == "memory"
        assert r["util"] == pytest.approx(24576 / (t * 1e12))  # about 0.13, not 0.7
        assert r["headroom"] == pytest.approx(t / (139264 / 1e12))
