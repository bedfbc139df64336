"""Training-step estimator: hand-computed partitions, bubbles, ZeRO memory, parameter counts,
the analytical mode, upstream's example, the CLI contract."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from opatlas.errors import SpecError
from opatlas.estimate import estimate_step, load_config, search
from opatlas.estimate import model as pm
from opatlas.estimate.config import TrainConfig
from opatlas.estimate.memory import activation_bytes_per_layer, model_state_bytes
from opatlas.estimate.pipeline import Schedule, partition_layers


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
@pytest.mark.parametrize("layers", [32, 30, 80, 7 * 8 + 3])
def test_stage_partitions_sum_to_the_layers(pp, layers):
    parts = partition_layers(layers, pp)
    assert sum(parts) == layers and len(parts) == pp
    assert max(parts) - min(parts) <= 1
    if 0 < layers % pp <= pp - 2:  # extras fit in the middle stages (the ends hold embed/head)
        assert parts[0] == parts[-1] == layers // pp


def test_partition_examples_by_hand():
    assert partition_layers(32, 4) == [8, 8, 8, 8]
    assert partition_layers(30, 4) == [7, 8, 8, 7]
    assert partition_layers(32, 1) == [32]
    with pytest.raises(ValueError):
        partition_layers(4, 8)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (8, 32, 1), (4, 16, 2), (8, 64, 4)])
def test_bubble_fractions(p, m, v):
    name = "interleaved" if v > 1 else "1f1b"
    s = Schedule(name, p, m, v)
    assert s.bubble_fraction() == pytest.approx((p - 1) / (v * m))
    assert s.time(1.0) == pytest.approx(m + (p - 1) / v)  # m·t + (p−1)·t/v
    assert Schedule("gpipe", p, m).time(1.0) == pytest.approx(m + p - 1)  # upstream's AFAB
    assert Schedule("1f1b", p, m).in_flight() == min(p, m)
    assert Schedule("gpipe", p, m).in_flight() == m


def test_zero_memory_matches_the_zero_paper():
    # Rajbhandari et al. 2020, Fig. 1: Ψ = 7.5B, N_d = 64, K = 12
    psi, nd = 7.5e9, 64
    gb = lambda zero: sum(model_state_bytes(psi, nd, zero).values()) / 1e9  # noqa: E731
    assert gb(0) == pytest.approx(120.0)
    assert gb(1) == pytest.approx(31.4, abs=0.05)
    assert gb(2) == pytest.approx(16.6, abs=0.05)
    assert gb(3) == pytest.approx(1.875, abs=0.01)


def test_activation_memory_matches_korthikanti():
    cfg = load_config("gpt3-175b").model
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    no_sp = activation_bytes_per_layer(cfg, b, t, False, "none", flash=False)
    assert no_sp == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    sp_sel = activation_bytes_per_layer(cfg, b, t, True, "selective")
    assert sp_sel == pytest.approx(s * b * h * 34 / t)
    assert activation_bytes_per_layer(cfg, b, t, True, "full") == pytest.approx(2 * s * b * h / t)


def test_activation_memory_follows_the_ffn_its_kind_and_the_experts():
    from opatlas.estimate.config import ModelConfig

    s, b, h, t = 1024, 2, 1024, 2
    base = {"layers": 1, "hidden": h, "heads": 16, "seq_len": s}
    rest = 10 * h + 8 * h / t  # norms, inputs, masks; Q, K, V and context

    def per_token(**model):
        return activation_bytes_per_layer(ModelConfig(**base, **model), b, t, False,
                                          "selective") / (s * b)

    assert per_token(ffn=4 * h) == pytest.approx(rest + 16 * h / t)  # Korthikanti's 4·h FFN
    assert per_token(ffn=1000) == pytest.approx(rest + 4 * 1000 / t)  # GELU in and out
    assert per_token(ffn=1000, ffn_kind="swiglu") == pytest.approx(rest + 6 * 1000 / t)
    # top-2 of 8 SwiGLU experts: each routed copy keeps its input and its FFN's tensors
    moe = per_token(ffn=1000, ffn_kind="swiglu", experts=8, top_k=2)
    assert moe == pytest.approx(rest + 2 * (6 * 1000 + 2 * h) / t)


def test_fp32_training_keeps_four_byte_weights_and_activations_and_no_master_copy():
    cfg = load_config("llama2-7b")
    bf16 = estimate_step(cfg)
    fp32 = estimate_step(cfg.model_copy(update={
        "training": cfg.training.model_copy(update={"dtype": "fp32"})}))
    for part, ratio in (("weights", 2.0), ("gradients", 2.0), ("activations", 2.0),
                        ("optimizer", 8 / 12)):  # Adam's two moments; the weights are fp32
        assert getattr(fp32.memory, part) == pytest.approx(ratio * getattr(bf16.memory, part))
    psi = 1e9
    assert model_state_bytes(psi, 1, 0, weight_bytes=4, grad_bytes=4) == \
        {"weights": 4e9, "gradients": 4e9, "optimizer": 8e9}


def test_parameter_counts_of_published_models():
    assert pm.total_params(load_config("llama2-7b").model) == pytest.approx(6.74e9, rel=0.01)
    assert pm.total_params(load_config("llama2-13b").model) == pytest.approx(13.0e9, rel=0.01)
    assert pm.total_params(load_config("llama2-70b").model) == pytest.approx(68.98e9, rel=0.01)
    assert pm.total_params(load_config("gpt3-175b").model) == pytest.approx(175e9, rel=0.01)
    assert pm.total_params(load_config("mixtral-8x7b").model) == pytest.approx(46.7e9, rel=0.01)


def test_analytical_mode_needs_no_data(monkeypatch):
    import opatlas.fit.data as data

    monkeypatch.setattr(data, "load_op_data", lambda *a, **k: pytest.fail("data was read"))
    e = estimate_step(load_config("llama2-70b"))
    assert set(e.breakdown) == {"compute", "tp_comm", "ep_comm", "pp_bubble", "p2p", "dp_comm",
                                "optimizer"}
    assert e.step_time_s == pytest.approx(sum(e.breakdown.values()))
    assert e.breakdown["optimizer"] > 0 and e.breakdown["pp_bubble"] > 0 and e.fits
    assert 0.2 < e.mfu < 0.7


def test_optimizer_counted_with_dp_1_and_step_grows_with_layers():
    base = load_config("llama2-7b")
    one = TrainConfig.model_validate({**base.model_dump(), "parallel": {
        **base.parallel.model_dump(), "dp": 1}, "training": {**base.training.model_dump(),
                                                             "global_batch": 32}})
    e = estimate_step(one)
    assert e.breakdown["optimizer"] > 0 and e.breakdown["dp_comm"] == 0
    deeper = one.model_copy(update={"model": one.model.model_copy(update={"layers": 64})})
    assert estimate_step(deeper).step_time_s > 1.8 * e.step_time_s * 0.9


def test_upstream_llemma_example_with_bundled_a100_data():
    cfg = load_config("llemma_7b_4_2_2_P")  # estimate-train-time's YAML, unchanged
    assert (cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.dp, cfg.micro_batches) == (4, 2, 2, 8)
    e = estimate_step(cfg)
    assert e.stages == [8, 8, 8, 8]
    assert e.step_time_s == pytest.approx(9.48, rel=0.10)  # upstream printed 9.48 s
    assert e.breakdown["optimizer"] > 0 and e.fits


def test_search_ranks_fitting_layouts(tmp_path):
    best, n, oom = search(load_config("llama2-7b"), 64, top=5)
    assert n >= 1000 and 0 < oom < n
    assert [e.step_time_s for e in best] == sorted(e.step_time_s for e in best)
    assert all(e.fits and e.config.gpus == 64 for e in best)


def test_cli_json_contract_and_plot(tmp_path):
    out = json.loads(run_cli("estimate", "llama2-13b", "--json", "--plot",
                             str(tmp_path / "b.png"), check=True).stdout)
    assert {"step_time_s", "breakdown", "tokens_per_s", "mfu", "memory_gib", "fits"} <= set(out)
    assert out["step_time_s"] == pytest.approx(sum(out["breakdown"].values()))
    assert (tmp_path / "b.png").stat().st_size > 1000
    s = json.loads(run_cli("estimate", "llama2-7b", "--search", "--gpus", "16", "--top", "3",
                           "--json", check=True).stdout)
    assert len(s["top"]) == 3 and s["evaluated"] > 100


def test_bad_config_is_a_clear_error(tmp_path):
    p = tmp_path / "bad.yml"
    p.write_text("model: {layers: 4, hidden: 100, heads: 3, seq_len: 8}\ntraining: {global_batch: 8}\n")
    with pytest.raises(SpecError, match="not divisible by heads"):
        load_config(p)
    proc = run_cli("estimate", str(p))
    assert proc.returncode == 2 and str(p) in proc.stderr


def _mixtral(**parallel) -> TrainConfig:
    d = load_config("mixtral-8x7b").model_dump()
    d["parallel"].update(parallel)
    return TrainConfig.model_validate(d)


def test_expert_parallelism_by_hand():
    """Mixtral, tp 1, dp 8, pp 4: with ep 8 every MoE layer adds 2 all-to-alls forward and 2
    backward of each rank's top-2 token copies, inside one node (8 ranks, stride 1); each rank
    keeps 1/8 of the experts, whose states ZeRO-1 shards over dp/ep = 1 rank."""
    one, eight = estimate_step(_mixtral(tp=1, dp=8, ep=1)), estimate_step(_mixtral(tp=1, dp=8, ep=8))
    c = _mixtral(tp=1, dp=8, ep=8)
    m, cl = c.model, c.cluster
    nbytes = 2.0 * c.training.micro_batch * m.seq_len * m.top_k * m.hidden
    a2a = 7 / 8 * nbytes / (cl.intra_bw_gbps * 1e9) + 7 * cl.intra_latency_us * 1e-6
    layers = max(eight.stages)
    assert eight.breakdown["ep_comm"] == pytest.approx(c.micro_batches * layers * 4 * a2a)
    assert one.breakdown["ep_comm"] == 0.0
    assert eight.breakdown["compute"] == pytest.approx(one.breakdown["compute"])
    # weights and gradients (2 B each) of 7/8 of the experts leave the busiest device; the
    # Adam states (12 B) do not shrink: ZeRO-1 already sharded them over all 8 dp ranks, and
    # now shards 1/8 of them over dp/ep = 1 rank
    experts = layers * pm.expert_params(m)
    assert one.memory.weights - eight.memory.weights == pytest.approx(2 * experts * 7 / 8)
    assert one.memory.gradients - eight.memory.gradients == pytest.approx(2 * experts * 7 / 8)
    assert one.memory.optimizer == pytest.approx(eight.memory.optimizer)
    # the experts' gradients are reduced over dp/ep = 1 rank: less DP traffic
    assert eight.breakdown["dp_comm"] < one.breakdown["dp_comm"]


def test_expert_parallelism_is_validated_and_searched():
    with pytest.raises(ValueError, match="needs a MoE model"):
        d = load_config("llama2-7b").model_dump()
        d["parallel"]["ep"] = 2
        TrainConfig.model_validate(d)
    with pytest.raises(ValueError, match="must divide both experts"):
        _mixtral(tp=4, dp=4, pp=4, ep=8)
    from opatlas.estimate.search import candidates

    eps = {c.parallel.ep for c in candidates(load_config("mixtral-8x7b"), 64)}
    assert eps == {1, 2, 4, 8}
    assert {c.parallel.ep for c in candidates(load_config("llama2-7b"), 64)} == {1}


@pytest.mark.parametrize("name", ["llama2-70b", "mixtral-8x7b", "llemma_7b_4_2_2_P"])
@pytest.mark.parametrize("update", [{}, {"recompute": "full", "zero": 3},
                                    {"recompute": "none", "zero": 0, "dp_overlap": False}])
def test_items_add_up_to_the_step_and_its_breakdown(name, update):
    cfg = load_config(name)
    cfg = cfg.model_copy(update={"parallel": cfg.parallel.model_copy(update=update),
                                 "ops": cfg.ops.model_copy(update={"mode": "analytical"}),
                                 "cluster": cfg.cluster.model_copy(update={"nccl_data": None})})
    e = estimate_step(cfg)
    assert sum(it.time_s for it in e.items) == pytest.approx(e.step_time_s, rel=1e-12)
    for cat, total in e.breakdown.items():
        assert sum(it.time_s for it in e.items if it.category == cat) == pytest.approx(total)
    assert all(it.calls > 0 and it.time_s >= 0 for it in e.items)
    assert json.loads(json.dumps(e.as_json()))["items"][0]["pass"] == "fwd"


def test_items_by_hand_for_a_two_stage_pipeline():
    """llama2-70b, analytical: 80 layers over pp=2 (40 each); tp 8 all-reduces per layer: 2
    forward, 2 backward, 2 more for the recomputed forward under full recompute; the first
    device also all-reduces the embedding's output, the last the head's input gradient; one
    p2p per micro-batch on an end stage (each rank's 1/tp piece)."""
    cfg = load_config("llama2-70b")
    par = cfg.parallel.model_copy(update={"tp": 8, "pp": 2, "dp": 4, "recompute": "full",
                                          "schedule": "1f1b", "virtual_stages": 1})
    cfg = cfg.model_copy(update={"parallel": par,
                                 "ops": cfg.ops.model_copy(update={"mode": "analytical"}),
                                 "cluster": cfg.cluster.model_copy(update={"nccl_data": None})})
    e = estimate_step(cfg)
    nmb = cfg.micro_batches
    by = {(it.name, it.pass_): it for it in e.items if it.category != "dp_comm"}
    assert by[("all_reduce", "comm")].calls == nmb * (40 * 6 + 1)
    assert by[("p2p", "comm")].calls == nmb
    assert by[("p2p", "comm")].shape["bytes"] == 2 * 4096 * 8192 / 8
    # sequence parallelism: the activation is already split, nothing to gather for the p2p;
    # the backward gathers the QKV and FC1 inputs again, and the head's on the last device
    assert not [it for it in e.items if it.category == "p2p" and it.name == "all_gather"]
    regather = by[("all_gather", "comm")]
    assert (regather.category, regather.calls) == ("tp_comm", nmb * (40 * 2 + 1))
    assert by[("linear1", "fwd")].calls == nmb * 40
    assert by[("linear1", "recompute")].time_s == pytest.approx(by[("linear1", "fwd")].time_s)
    assert by[("linear1", "fwd")].shape == {"mp": 8, "b": cfg.training.micro_batch, "h": 64,
                                           "l": 4096, "dim": 8192, "kv_heads": 8}
    # the bubble: (p−1)/m of the slowest stage's busy time
    busy = sum(it.time_s for it in e.items if it.category in ("compute", "tp_comm", "p2p"))
    assert by[("pipeline bubble", "bubble")].time_s == pytest.approx(busy / nmb)


def test_cross_key_errors_name_the_rule_without_echoing_the_config(tmp_path):
    cfg = tmp_path / "bad.yml"
    cfg.write_text("model: {layers: 4, hidden: 512, heads: 6, seq_len: 128}\n"
                   "training: {global_batch: 8}\n")
    with pytest.raises(SpecError) as exc:
        load_config(cfg)
    msg = str(exc.value)
    assert "hidden 512 is not divisible by heads 6" in msg and "bad.yml" in msg
    assert "seq_len" not in msg and "Value error" not in msg


def test_json_has_no_infinity_for_a_device_without_a_memory_size():
    e = estimate_step(load_config("llama2-7b"))
    e.memory_limit_gib = float("inf")  # a device outside the catalog
    doc = json.loads(json.dumps(e.as_json(), allow_nan=False))
    assert doc["memory_limit_gib"] is None and doc["fits"] is None  # not checked
