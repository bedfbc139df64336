"""Unfused attention (Megatron-LM before FlashAttention): its time is the baddbmm, masked
softmax and bmm op models at the layer's shapes, its a·s² scores are kept unless recomputed,
and selective recomputation redoes exactly that core. Then: search shows equal layouts once."""

from __future__ import annotations

import pytest

from opatlas.devices import get_device
from opatlas.estimate import estimate_step, search
from opatlas.estimate.config import TrainConfig, from_ett
from opatlas.estimate.optimes import RooflineTimes

S, H, A, T, LAYERS, NMB = 1024, 1024, 16, 2, 4, 8


def _cfg(attention: str, recompute: str, **parallel) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"layers": LAYERS, "hidden": H, "heads": A, "seq_len": S, "vocab": 32000,
                  "attention": attention},
        "training": {"global_batch": NMB, "micro_batch": 1, "dtype": "fp16"},
        "parallel": {"dp": 1, "tp": T, "pp": 1, "recompute": recompute, "zero": 0, **parallel},
        "cluster": {"device": "A100"}, "ops": {"mode": "analytical"}})


def _op(op: str, pass_: str) -> float:
    """The roofline op model at the layer's shape: tp 2, batch 1, 16 heads, 1024 × 1024."""
    import pandas as pd

    fn = RooflineTimes(get_device("A100"), "fp16", 0.7, 0.8)
    shape = pd.DataFrame([{"mp": T, "b": 1, "h": A, "l": S, "dim": H}])
    return float(fn(op, shape, pass_)[0])


CORE = ("baddbmm", "ScaledUpperTriangMaskedSoftmax", "bmm")


def test_unfused_time_is_the_sum_of_its_op_models():
    flash, unfused = (estimate_step(_cfg(a, "none")) for a in ("flash", "unfused"))
    core = sum(_op(op, p) for op in CORE for p in ("fwd", "bwd"))
    fused = _op("flash_atten", "fwd") + _op("flash_atten", "bwd")
    assert core > fused > 0
    assert unfused.breakdown["compute"] - flash.breakdown["compute"] == \
        pytest.approx(NMB * LAYERS * (core - fused), rel=1e-9)


def test_selective_recomputation_redoes_the_core_forward_only():
    none, sel = (estimate_step(_cfg("unfused", r)) for r in ("none", "selective"))
    core_f = sum(_op(op, "fwd") for op in CORE)
    assert sel.breakdown["compute"] - none.breakdown["compute"] == \
        pytest.approx(NMB * LAYERS * core_f, rel=1e-9)
    # the itemised step shows the core's ops, and recompute rows for exactly them
    assert {it.name for it in sel.items if it.pass_ == "recompute"} == set(CORE)
    assert {it.name for it in none.items if it.pass_ == "fwd"} >= set(CORE)
    # flash attention keeps no scores: selective recomputes nothing
    f_none, f_sel = (estimate_step(_cfg("flash", r)) for r in ("none", "selective"))
    assert f_sel.step_time_s == f_none.step_time_s


def test_unfused_activation_memory_by_hand():
    """Korthikanti et al. 2022, eq. (2): s·b·h·(10 + 24/t + 5·a·s/(h·t)) per layer, the last
    term only while the scores are kept; one micro-batch in flight (pp = 1)."""
    sbh = S * 1 * H
    kept = LAYERS * sbh * (10 + 24 / T + 5 * A * S / (H * T))  # 4·1 Mi·(22 + 40) B
    assert kept == 260_046_848
    acts = {r: estimate_step(_cfg("unfused", r)).memory.activations for r in
            ("none", "selective", "full")}
    assert acts["none"] == pytest.approx(kept)
    assert acts["selective"] == pytest.approx(LAYERS * sbh * 22)
    assert acts["full"] == pytest.approx(LAYERS * 2 * sbh)
    assert estimate_step(_cfg("flash", "none")).memory.activations == pytest.approx(
        LAYERS * sbh * 22)


def test_upstream_function_list_without_flash_is_unfused():
    base = {"training_config": [1, 2, 1, 1, 16, 1024, 1024, 8, 4], "encoders": 4}
    unfused = ["layernorm", "linear1", "baddbmm", "ScaledUpperTriangMaskedSoftmax", "bmm",
               "linear2", "layernorm", "res_add", "linear3", "gelu", "linear4", "res_add"]
    assert from_ett({**base, "encoder_function_list": unfused})["model"]["attention"] == "unfused"
    flash = [f if f != "baddbmm" else "flash_atten" for f in unfused]
    assert from_ett({**base, "encoder_function_list": flash})["model"]["attention"] == "flash"


def test_search_shows_equal_layouts_once():
    """Under flash attention recompute none and selective give the same time and memory: one
    row, the other listed as equivalent (and in --json)."""
    cfg = _cfg("flash", "none")
    best, n, _ = search(cfg, 8, top=50)
    keys = [(e.step_time_s, e.memory.total) for e in best]
    assert len(set(keys)) == len(keys)
    first = best[0]
    assert first.equivalent, "the fastest layout has a twin with selective recomputation"
    twin = first.equivalent[0]
    assert twin.parallel.recompute != first.config.parallel.recompute
    assert estimate_step(twin).step_time_s == pytest.approx(first.step_time_s)
    js = first.as_json()["equivalent"]
    assert js[0]["recompute"] == twin.parallel.recompute
    assert sum(1 + len(e.equivalent) for e in best) <= n


def test_attention_dropout_is_a_memory_roofline_over_the_scores():
    """Dropout 0.1 on the probabilities: b·(a/t)·s² elements, 2 + 2 + 1 bytes each way (fp16
    in and out, a one-byte mask), at A100 bandwidth × the ops' memory efficiency (0.8);
    redone by selective recomputation with the rest of the core."""
    d = _cfg("unfused", "selective").model_dump()
    d["model"]["attention_dropout"] = 0.1
    with_drop = estimate_step(TrainConfig.model_validate(d))
    plain = estimate_step(_cfg("unfused", "selective"))
    one = 1 * (A // T) * S * S * 5 / (get_device("A100").bandwidth * 0.8)
    rows = {it.pass_: it for it in with_drop.items if it.name == "attention_dropout"}
    assert set(rows) == {"fwd", "bwd", "recompute"}
    assert rows["fwd"].time_per_call_s == pytest.approx(one)
    assert with_drop.breakdown["compute"] - plain.breakdown["compute"] == \
        pytest.approx(NMB * LAYERS * 3 * one)


def _with(cfg: TrainConfig, **model) -> TrainConfig:
    d = cfg.model_dump()
    d["model"].update(model)
    return TrainConfig.model_validate(d)


def test_residual_adds_with_biases_or_dropout_are_megatrons_bias_dropout_add():
    """No bias, no dropout: upstream's residual add. With them: the fused bias-dropout-add on
    the full hidden state of each TP rank (no sequence parallelism), by the memory roofline:
    fp16 x and residual in, sum out and a 1-byte mask (7 bytes), the bias (2 per column);
    backward 13 bytes (accumulation add 6, dropout gradient 5, bias sum 2)."""
    base = _cfg("flash", "none")
    names = {it.name for it in estimate_step(base).items}
    assert "res_add" in names and "bias_dropout_add" not in names
    both = estimate_step(_with(base, bias=True, hidden_dropout=0.1))
    rows = {it.pass_: it for it in both.items if it.name == "bias_dropout_add"}
    assert set(rows) == {"fwd", "bwd"} and "res_add" not in {it.name for it in both.items}
    bw = get_device("A100").bandwidth * 0.8
    n = 1 * S * H
    assert rows["fwd"].calls == NMB * LAYERS * 2
    assert rows["fwd"].time_per_call_s == pytest.approx((7 * n + 2 * H) / bw)
    assert rows["bwd"].time_per_call_s == pytest.approx((13 * n + 2 * H) / bw)
    # a bias on the attention's projection, none on the FFN's, no dropout: a row for each
    split = estimate_step(_with(base, bias=True, mlp_bias=False))
    fwd = sorted(it.time_per_call_s for it in split.items
                 if it.name == "bias_dropout_add" and it.pass_ == "fwd")
    assert fwd == pytest.approx([6 * n / bw, (6 * n + 2 * H) / bw])
    # sequence parallelism splits it along the sequence like the norms
    sp = estimate_step(_with(_cfg("flash", "none", sequence_parallel=True), bias=True,
                             hidden_dropout=0.1))
    (row,) = [it for it in sp.items if it.name == "bias_dropout_add" and it.pass_ == "fwd"]
    assert row.shape["l"] == S // T
    assert row.time_per_call_s == pytest.approx((7 * n / T + 2 * H) / bw)


def test_collectives_across_nodes_use_the_rails_of_their_ranks():
    """A ring over 4 nodes × 8 GPUs crosses each node on 8 rails of 25 GB/s: 200 GB/s of bus
    bandwidth, capped by NVLink; one GPU per node gets one rail; an all-to-all's off-node share
    one port."""
    import numpy as np

    from opatlas.estimate.comm import AlphaBeta
    from opatlas.estimate.config import ClusterConfig

    ab = AlphaBeta(ClusterConfig(intra_bw_gbps=300, inter_bw_gbps=25, inter_latency_us=0))
    size = np.array([1e9])
    ring = 2 * 31 / 32 * 1e9
    assert ab.time("all_reduce", size, 32, False, per_node=8)[0] == pytest.approx(ring / 200e9)
    assert ab.time("all_reduce", size, 32, False, per_node=1)[0] == pytest.approx(ring / 25e9)
    assert ab.time("all_reduce", size, 64, False, per_node=16)[0] == pytest.approx(
        2 * 63 / 64 * 1e9 / 300e9)  # NVLink caps it
    # all-to-all: the 24/32 sent off-node cross the rank's port, the 7/32 on-node go over
    # NVLink at the same time (7/32·1e9/300e9 = 0.73 ms, the shorter)
    assert ab.time("all_to_all", size, 32, False, per_node=8)[0] == pytest.approx(
        24 / 32 * 1e9 / 25e9)


def test_collectives_without_samples_are_said_once_grouped_by_collective(tmp_path):
    import numpy as np

    from opatlas.estimate.comm import Measured, take_fallback_note
    from opatlas.estimate.config import ClusterConfig

    comm = Measured(ClusterConfig(), tmp_path, "A100")  # an empty folder: nothing measured
    size = np.array([1e6])
    for op, nodes, gpn in (("all_reduce", 4, 8), ("all_gather", 2, 8), ("all_reduce", 2, 8),
                           ("all_reduce", 4, 8)):
        alpha_beta = comm.time(op, size, nodes * gpn, False, gpn)
        assert comm.time_topology(op, size, nodes, gpn, False) == pytest.approx(alpha_beta)
    note = take_fallback_note(comm)
    assert f"no measured samples in {tmp_path} for all_gather on 2×8; all_reduce on 2×8, 4×8 " \
           "(nodes × GPUs per node)" in note
    assert take_fallback_note(comm) is None  # said once
