"""`opatlas estimate --search` and the estimate inputs, as a review found them: an assumed
batch that an odd GPU count's dp cannot divide, --set values the search never tried, the
input's own layout refusing a held value, and --analytical or data-mode fallbacks that
assumed without saying so."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import cli_in_process, one_error
from opatlas.errors import OpatlasError
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate.config import read_config, validate_config
from opatlas.estimate.inputs import fallback_assumptions, load_inputs, with_flags
from opatlas.estimate.search import candidates, search


def _search_inputs(name: str, gpus: int, *sets: str):
    return load_inputs(name, gpus=gpus, sets=sets, search=True)


# 1. an assumed batch divides into the layouts of an odd GPU count


@pytest.mark.parametrize("name, gpus, seq, batch, note", [
    ("qwen2.5-7b", 48, 4096, 768, "3 × 256"),  # 4 Mi tokens = 1024 sequences; 3·256 nearest
    ("llama-3.1-8b", 96, 8192, 384, "3 × 128"),  # 512 sequences; 3·128 nearest
    ("llama-3.1-8b", 64, 8192, 512, "the power of two"),  # no odd factor: as before
])
def test_an_assumed_batch_carries_the_odd_factor_of_the_searched_gpus(name, gpus, seq, batch,
                                                                     note):
    inputs = _search_inputs(name, gpus, f"model.seq_len={seq}")
    assert inputs.config.training.global_batch == batch
    said = [n for n in inputs.notes if n.startswith("assumed training.global_batch")]
    assert len(said) == 1 and f"= {batch} sequences ({note}" in said[0]
    layouts = candidates(inputs.config, gpus)
    assert layouts and {c.gpus for c in layouts} == {gpus}


def test_an_odd_micro_batch_held_multiplies_the_odd_factor():
    inputs = _search_inputs("qwen2.5-7b", 48, "model.seq_len=4096", "training.micro_batch=3")
    assert inputs.config.training.global_batch == 9 * 128  # 1024 / 9 = 114: 128 is nearest
    assert candidates(inputs.config, 48, inputs.pinned)


def test_the_cli_search_of_an_odd_gpu_count_ranks_layouts(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "qwen2.5-7b", "--search", "--gpus", "48",
                                    "--set", "model.seq_len=4096", "--top", "2", "--json")
    assert code == 0, err
    assert "assumed training.global_batch = 768 sequences (3 × 256" in err
    top = json.loads(out)["top"]
    assert len(top) == 2 and {e["parallel"]["dp"] % 3 for e in top} == {0}


def test_no_valid_layout_says_the_remedy():
    with pytest.raises(OpatlasError) as exc:
        search(load_config("llama2-70b"), 48)  # its file's batch: 1024, no factor 3
    msg = str(exc.value)
    assert "no valid layout of 48 GPUs" in msg
    assert "--set training.global_batch=768" in msg and "--gpus 32 or 64" in msg
    with pytest.raises(OpatlasError, match=r"pp 3 does not divide 64 GPUs"):
        search(load_config("llama2-70b"), 64, fixed={"parallel.pp": 3})


def test_the_remedy_it_says_works():
    cfg = load_config("llama2-70b")
    cfg = cfg.model_copy(update={"training": cfg.training.model_copy(
        update={"global_batch": 768})})
    assert candidates(cfg, 48)


# 2. a held key's domain is its held value, whether or not the search tries it


@pytest.mark.parametrize("name, fixed", [
    ("llama2-7b", {"parallel.schedule": "gpipe"}),
    ("llama2-70b", {"parallel.virtual_stages": 4}),
    ("llama2-7b", {"parallel.tp": 2, "parallel.sequence_parallel": False}),
    ("llama2-7b", {"training.micro_batch": 16}),
    ("llama2-70b", {"parallel.schedule": "interleaved", "parallel.virtual_stages": 5}),
])
def test_held_values_outside_the_searched_lists_are_searched(name, fixed):
    layouts = candidates(load_config(name), 64, fixed)
    assert layouts
    for c in layouts:
        for key, value in fixed.items():
            section, field = key.split(".")
            assert getattr(getattr(c, section), field) == value


def test_unheld_keys_keep_the_searched_lists():
    layouts = candidates(load_config("llama2-70b"), 64)
    assert {c.parallel.schedule for c in layouts} == {"1f1b", "interleaved"}
    assert {c.parallel.virtual_stages for c in layouts} == {1, 2}
    assert all(c.parallel.sequence_parallel == (c.parallel.tp > 1) for c in layouts)
    assert {c.training.micro_batch for c in layouts} == {1, 2, 4, 8}


def test_a_held_micro_batch_ends_in_a_ranking_or_none_fits(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--search", "--gpus", "64",
                                    "--set", "training.micro_batch=16", "--top", "3", "--json")
    assert "no valid layout" not in err
    if code:  # it may not fit: then the search says what the leanest layout needs
        one_error(code, err, "none of the", "the leanest")
    else:
        assert {e["parallel"]["micro_batch"] for e in json.loads(out)["top"]} == {16}


def test_the_cli_keeps_a_held_gpipe_and_no_sequence_parallelism(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--search", "--gpus", "64",
                                    "--set", "parallel.schedule=gpipe", "--set", "parallel.tp=2",
                                    "--set", "parallel.sequence_parallel=false", "--json")
    assert code == 0, err
    layouts = [e["parallel"] for e in json.loads(out)["top"]]
    assert layouts and {(x["schedule"], x["tp"], x["sequence_parallel"]) for x in layouts} == {
        ("gpipe", 2, False)}


# 3. the input's own layout does not make a held value invalid


@pytest.mark.parametrize("sets, pinned", [
    (["parallel.schedule=1f1b"], {"parallel.schedule": "1f1b"}),
    (["parallel.pp=3"], {"parallel.pp": 3}),
    (["parallel.virtual_stages=4"], {"parallel.virtual_stages": 4}),
])
def test_the_files_own_layout_does_not_refuse_a_held_value(sets, pinned):
    # llama2-70b's file runs interleaved with virtual_stages 5
    inputs = _search_inputs("llama2-70b", 64, *sets)
    assert inputs.pinned == pinned


def test_a_held_pipeline_depth_the_file_could_not_take_is_searched(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llama2-70b", "--search", "--gpus", "80",
                                    "--set", "parallel.pp=5", "--set", "parallel.schedule=1f1b",
                                    "--top", "3", "--json")
    assert code == 0, err
    assert "--search keeps parallel.pp = 5, parallel.schedule = 1f1b" in err
    layouts = [e["parallel"] for e in json.loads(out)["top"]]
    assert layouts and {(x["pp"], x["schedule"], x["virtual_stages"]) for x in layouts} == {
        (5, "1f1b", 1)}


def test_a_held_value_of_the_wrong_kind_is_one_error_naming_set(capsys):
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", "--search", "--gpus", "64",
                              "--set", "parallel.schedule=zigzag")[::2],
              "--set", "parallel.schedule", "zigzag")
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", "--search", "--gpus", "64",
                              "--set", "parallel.tp=0")[::2], "--set", "parallel.tp")


def test_without_search_a_set_layout_is_still_validated_whole(capsys):
    one_error(*cli_in_process(capsys, "estimate", "llama2-70b", "--set",
                              "parallel.schedule=1f1b")[::2], "virtual_stages 5")


# 4. --analytical and data-mode fallbacks say what they assume


def test_analytical_says_and_uses_what_the_analytical_file_would(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llemma_7b_4_2_2_P", "--analytical",
                                    "--json")
    assert code == 0, err
    doc = json.loads(out)
    said = doc["assumptions"]
    assert any("dgx-a100 preset" in n and "cluster.intra_bw_gbps = 300.0" in n for n in said)
    assert any(n.startswith("assumed (the defaults) ops.compute_efficiency = 0.7, "
                            "ops.memory_efficiency = 0.8") for n in said)
    assert all(f"note: {n}" in err for n in said)
    # the same config written with ops.mode analytical and no NCCL data
    raw, path = read_config("llemma_7b_4_2_2_P")
    raw = {**raw, "ops": {"mode": "analytical"},
           "cluster": {k: v for k, v in raw["cluster"].items() if k != "nccl_data"}}
    notes: list[str] = []
    written = validate_config(raw, path, notes)
    assert written.cluster.intra_bw_gbps == 300.0 and written.cluster.inter_bw_gbps == 25.0
    assert doc["step_time_s"] == pytest.approx(estimate_step(written).step_time_s, rel=1e-12)


def test_with_flags_says_nothing_for_a_config_already_analytical():
    cfg = load_config("llama2-7b")
    notes: list[str] = []
    assert with_flags(cfg, False, True, notes) == cfg and notes == []


def test_given_efficiencies_and_links_are_kept_and_not_said():
    raw, path = read_config("llemma_7b_4_2_2_P")
    raw = {**raw, "ops": {**raw["ops"], "compute_efficiency": 0.5, "memory_efficiency": 0.6},
           "cluster": {**raw["cluster"], "intra_bw_gbps": 200.0, "inter_bw_gbps": 20.0,
                       "intra_latency_us": 5.0, "inter_latency_us": 10.0}}
    notes: list[str] = []
    cfg = with_flags(validate_config(raw, path), False, True, notes)
    assert (cfg.ops.compute_efficiency, cfg.cluster.intra_bw_gbps) == (0.5, 200.0)
    assert cfg.ops.mode == "analytical" and cfg.cluster.nccl_data is None and notes == []


def test_a_data_mode_yaml_whose_ops_fall_back_says_the_roofline_efficiencies(tmp_path,
                                                                            capsys):
    cfg = tmp_path / "swiglu.yml"  # the bundled A100 data has no swiglu
    cfg.write_text(yaml.safe_dump({
        "model": {"name": "t", "layers": 4, "hidden": 2048, "heads": 16, "ffn": 5504,
                  "ffn_kind": "swiglu", "seq_len": 2048, "norm": "rmsnorm", "rope": True},
        "training": {"global_batch": 16, "micro_batch": 1, "dtype": "fp16"},
        "parallel": {"dp": 2, "tp": 2, "pp": 1},
        "cluster": {"device": "A100", "gpus_per_node": 4},
        "ops": {"mode": "data"}}))
    code, out, err = cli_in_process(capsys, "estimate", str(cfg), "--json")
    assert code == 0, err
    said = [n for n in json.loads(out)["assumptions"] if "ops.compute_efficiency" in n]
    assert said == ["assumed (the defaults) ops.compute_efficiency = 0.7, "
                    "ops.memory_efficiency = 0.8 for the ops without measured data (the "
                    "roofline); --set ops.KEY=VALUE"]
    assert f"note: {said[0]}" in err


def test_measured_collectives_that_fall_back_say_the_links_they_assume():
    cfg = load_config("llemma_7b_4_2_2_P")  # A100, NCCL samples, no links given
    fell_back = [estimate_step(cfg)]
    fell_back[0].alpha_beta_collectives = True  # as if a collective had no samples
    # the A100's own system's links were filled (and said) at load: only the latencies, which
    # no preset gives, are defaults to say
    assert (cfg.cluster.intra_bw_gbps, cfg.cluster.inter_bw_gbps) == (300.0, 25.0)
    said = fallback_assumptions(cfg, fell_back)
    assert len(said) == 1 and "bw_gbps" not in said[0]
    assert "cluster.intra_latency_us = 5.0, cluster.inter_latency_us = 10.0" in said[0]
    # a device without a system preset keeps the defaults, and says them when they are used
    bare = cfg.model_copy(update={"cluster": type(cfg.cluster).model_validate(
        {"device": "MI300X", "nccl_data": cfg.cluster.nccl_data})})
    said = fallback_assumptions(bare, fell_back)
    assert len(said) == 1 and "cluster.intra_bw_gbps = 450.0" in said[0]
    fell_back[0].alpha_beta_collectives = False
    assert fallback_assumptions(bare, fell_back) == []  # nothing fell back: nothing to say


def test_a_layout_whose_tp_does_not_divide_the_ffn_is_no_candidate():
    """Megatron-LM splits the FFN's width over tp: such a layout is refused by the config, so
    the search skips it (the measured op models refuse its shapes)."""
    cfg = load_config("llemma_7b_4_2_2_P")  # 4 GPUs a node: tp up to 4
    odd = cfg.model_copy(update={"model": cfg.model.model_copy(update={"ffn": 11002})})
    tps = {c.parallel.tp for c in candidates(odd, 16)}
    assert tps == {1, 2}  # 11002 = 2 · 5501
    assert {c.parallel.tp for c in candidates(cfg, 16)} == {1, 2, 4}
    with pytest.raises(ValueError, match="ffn 11001 not divisible by tp 2"):
        type(cfg).model_validate({**cfg.model_dump(),
                                  "model": {**cfg.model.model_dump(), "ffn": 11001}})
