"""--strict refuses what opatlas assumes for a Hugging Face config.json (a field it leaves
out, the run's sequence length and batch), naming the file, the key, the value it would
take and the --set that states it; a value stated explicitly is no assumption, and states
the same run as the assumed one."""

from __future__ import annotations

import json
import re

import pytest

from conftest import cli_in_process, one_error
from opatlas.estimate.config import ModelConfig, TrainConfig
from opatlas.estimate.hf import map_hf_config
from opatlas.estimate.inputs import load_inputs

# a Llama without num_key_value_heads: transformers' default, one KV head per head (16)
LLAMA = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16,
         "num_hidden_layers": 4, "intermediate_size": 5504, "vocab_size": 32000,
         "max_position_embeddings": 2048, "hidden_act": "silu", "tie_word_embeddings": False,
         "attention_bias": False, "mlp_bias": False}
# everything but the model written out, so that the HF defaults are all --strict can refuse
LAYOUT = ("training.dtype=bf16", "training.micro_batch=1", "parallel.dp=1", "parallel.tp=1",
          "parallel.pp=1", "parallel.zero=0", "parallel.recompute=none",
          "cluster.preset=dgx-a100", "ops.mode=analytical", "ops.compute_efficiency=0.6",
          "ops.memory_efficiency=0.8")
RUN = ("model.seq_len=2048", "training.global_batch=64")


def _sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    return path


def _estimate(capsys, config, *args: str) -> tuple[int, dict | None, str]:
    code, out, err = cli_in_process(capsys, "estimate", str(config), "--json",
                                    *_sets(*LAYOUT, *RUN), *args)
    return code, json.loads(out) if code == 0 else None, err


def test_an_assumed_field_is_said_without_strict(capsys, config):
    code, est, err = _estimate(capsys, config)
    assert code == 0, err
    assert f"{config}: assumed num_key_value_heads = 16 (multi-head attention" in err
    assert est["step_time_s"] > 0


def test_strict_refuses_an_assumed_field_naming_file_key_value_and_the_set(capsys, config):
    code, _, err = _estimate(capsys, config, "--strict")
    line = one_error(code, err, f"In file {config}, key 'num_key_value_heads', value 16",
                     "--strict refuses defaults", "--set model.kv_heads=16",
                     "write num_key_value_heads into the config.json")
    assert "the config.json leaves it out" in line


def test_the_value_stated_explicitly_passes_strict_and_times_the_same_run(capsys, config):
    code, assumed, err = _estimate(capsys, config)
    assert code == 0, err
    code, stated, err = _estimate(capsys, config, "--strict", "--set", "model.kv_heads=16")
    assert code == 0, err
    assert stated["step_time_s"] == assumed["step_time_s"]
    assert stated["memory_gib"] == assumed["memory_gib"]
    # and the equality is no accident: another KV head count is another run
    code, gqa, err = _estimate(capsys, config, "--strict", "--set", "model.kv_heads=4")
    assert code == 0, err
    assert gqa["step_time_s"] < assumed["step_time_s"]


def test_strict_refuses_the_assumed_sequence_length_and_batch(capsys, config):
    """No config.json field gives the run's sequence length or batch: each is refused
    until stated, in the order opatlas assumes them."""
    base = ("estimate", str(config), "--strict", *_sets(*LAYOUT, "model.kv_heads=16"))
    one_error(*cli_in_process(capsys, *base)[::2],
              f"In file {config}, key 'model.seq_len', value 2048",
              "max_position_embeddings", "--set model.seq_len=2048")
    line = one_error(*cli_in_process(capsys, *base, "--set", "model.seq_len=2048")[::2],
                     f"In file {config}, key 'training.global_batch', value 2048",
                     "--set training.global_batch=2048")
    assert "write" not in line  # no field of the file holds it
    code, _, err = cli_in_process(capsys, *base, *_sets(*RUN))
    assert code == 0, err


def test_strict_refuses_under_search_too(capsys, config):
    args = ("estimate", str(config), "--search", "--gpus", "8", "--strict",
            *_sets(*LAYOUT[:2], *LAYOUT[7:], *RUN, "parallel.dp_overlap=true",
                   "parallel.bucket_mb=25", "cluster.intra_latency_us=5"))
    one_error(*cli_in_process(capsys, *args)[::2], "key 'num_key_value_heads', value 16")
    code, _, err = cli_in_process(capsys, *args, "--set", "model.kv_heads=16")
    assert code == 0, err


def test_a_yaml_stating_the_value_beside_model_hf_passes_strict(capsys, config, tmp_path):
    yml = tmp_path / "run.yml"
    yml.write_text(f"model: {{hf: {config.name}, kv_heads: 16, seq_len: 2048}}\n"
                   "training: {global_batch: 64, dtype: bf16, micro_batch: 1}\n"
                   "parallel: {dp: 1, tp: 1, pp: 1, zero: 0, recompute: none}\n"
                   "cluster: {preset: dgx-a100}\n"
                   "ops: {mode: analytical, compute_efficiency: 0.6, memory_efficiency: 0.8}\n")
    code, _, err = cli_in_process(capsys, "estimate", str(yml), "--strict")
    assert code == 0, err


GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 2, "vocab_size": 50257,
        "n_positions": 1024}


def test_every_hf_default_is_stated_by_a_model_key_with_the_value_it_takes():
    """GPT-2's file leaves out n_inner, the activation, the dropouts and the tying: each
    default names the ModelConfig key that states it, and the value that key takes."""
    mapped = map_hf_config(GPT2, "gpt2.json")
    found = {a.key: (a.stated_by, a.given) for a in mapped.defaults}
    assert found == {"n_inner": ("model.ffn", 4 * 768),
                     "model.seq_len": ("model.seq_len", 1024),
                     "activation_function": ("model.ffn_kind", "gelu"),
                     "tie_word_embeddings": ("model.tied_embeddings", True),
                     "attn_pdrop": ("model.attention_dropout", 0.1),
                     "resid_pdrop": ("model.hidden_dropout", 0.1)}
    for stated_by, given in found.values():
        section, key = stated_by.split(".")
        assert section == "model" and key in ModelConfig.model_fields
        assert mapped.fields[key] == given  # what the mapping took is what the key states


def _advice(exc: Exception) -> str:
    match = re.search(r"state it with --set (\S+?)(,|\))", str(exc))
    assert match, exc
    return match.group(1)


def test_following_each_strict_error_states_the_same_config(tmp_path):
    """Round trip: add the --set each refusal names until --strict passes; the config is
    then the one the assumptions gave."""
    from opatlas.errors import SpecError

    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2))
    layout = [*LAYOUT]
    assumed = load_inputs(str(path), sets=layout).config
    added: list[str] = []
    for _ in range(10):
        try:
            stated = load_inputs(str(path), sets=[*layout, *added], strict=True).config
            break
        except SpecError as exc:
            added.append(_advice(exc))
    else:
        pytest.fail(f"--strict still refuses after {added}")
    assert [a.partition("=")[0] for a in added] == [
        "model.ffn", "model.seq_len", "model.ffn_kind", "model.tied_embeddings",
        "model.attention_dropout", "model.hidden_dropout", "training.global_batch"]
    assert isinstance(stated, TrainConfig)
    strip = {"ops": {"strict"}}
    assert stated.model_dump(exclude=strip) == assumed.model_dump(exclude=strip)


def test_a_value_given_explicitly_is_not_also_said_to_be_assumed(capsys, config):
    code, _, err = _estimate(capsys, config, *_sets("model.kv_heads=4"))
    assert code == 0, err
    assert "model.kv_heads = 4" in err  # said as given
    assert "assumed num_key_value_heads" not in err
    code, _, err = _estimate(capsys, config)
    assert "assumed num_key_value_heads = 16" in err  # and still said when it is assumed
