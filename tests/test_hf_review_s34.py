"""A Hugging Face config's values are checked before the HF path computes with them: a bad
model.seq_len or sliding_window is one error line, not a division by it; a sequence longer
than a learned position table is refused (as Megatron-LM's arguments are); a folder without
config.json says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_in_process, one_error

LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1536,
         "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 2,
         "max_position_embeddings": 2048, "vocab_size": 1000}
MISTRAL = {**LLAMA, "model_type": "mistral", "max_position_embeddings": 32768,
           "sliding_window": 4096}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
        "n_positions": 1024, "vocab_size": 50257}


def _hf(tmp_path: Path, config: dict, name: str = "m.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def _yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.yml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("value", "needle"), [
    ("0", "greater than 0"), ("-5", "greater than 0"), ("abc", "valid integer"),
    ("4k", "valid integer"), ("1e3", "valid integer"), ("true", "not true")])
def test_a_bad_seq_len_set_on_a_hugging_face_config_names_the_set(tmp_path, capsys, value,
                                                                   needle):
    code, _, err = cli_in_process(capsys, "estimate", _hf(tmp_path, LLAMA), "--set",
                                  f"model.seq_len={value}")
    one_error(code, err, "In --set", "key 'model.seq_len'", value, needle)


def test_a_bad_seq_len_under_search_names_the_set(tmp_path, capsys):
    code, _, err = cli_in_process(capsys, "estimate", _hf(tmp_path, LLAMA), "--search",
                                  "--gpus", "8", "--set", "model.seq_len=0")
    one_error(code, err, "In --set", "key 'model.seq_len'", "greater than 0")


def test_a_bad_seq_len_beside_model_hf_names_the_yaml(tmp_path, capsys):
    _hf(tmp_path, MISTRAL)
    run = _yaml(tmp_path, "model: {hf: m.json, seq_len: 2k}\n")
    code, _, err = cli_in_process(capsys, "estimate", run)
    one_error(code, err, f"In file {run}", "key 'model.seq_len'", "'2k'", "valid integer")


def test_a_seq_len_validation_coerces_is_still_taken(tmp_path, capsys):
    _hf(tmp_path, LLAMA)
    run = _yaml(tmp_path, "model: {hf: m.json, seq_len: '1024'}\ntraining: {global_batch: 8}\n")
    code, out, err = cli_in_process(capsys, "estimate", run, "--json")
    assert code == 0, err
    assert {it["shape"]["l"] for it in json.loads(out)["items"] if "l" in it["shape"]} == {1024}


@pytest.mark.parametrize("window", [0, -1, "4096"])
def test_a_sliding_window_that_is_no_positive_integer_is_refused(tmp_path, capsys, window):
    code, _, err = cli_in_process(capsys, "estimate",
                                  _hf(tmp_path, {**MISTRAL, "sliding_window": window}))
    one_error(code, err, "key 'sliding_window'", repr(window), "must be a positive integer")


def test_a_sequence_past_the_learned_position_table_is_refused(tmp_path, capsys):
    gpt2 = _hf(tmp_path, GPT2, "gpt2.json")
    code, _, err = cli_in_process(capsys, "estimate", gpt2, "--gpus", "1", "--set",
                                  "model.seq_len=8192")
    one_error(code, err, "gpt2.json", "key 'n_positions'", "value 1024",
              "shorter than model.seq_len 8192")
    code, _, err = cli_in_process(capsys, "estimate", _yaml(
        tmp_path, "model: {hf: gpt2.json, seq_len: 1025}\n"), "--gpus", "1")
    one_error(code, err, "key 'n_positions'", "shorter than model.seq_len 1025")


def test_the_whole_table_and_rope_models_are_not_limited(tmp_path, capsys):
    gpt2 = _hf(tmp_path, GPT2, "gpt2.json")
    code, out, err = cli_in_process(capsys, "estimate", gpt2, "--gpus", "1", "--set",
                                    "model.seq_len=1024", "--json")
    assert code == 0, err
    optimizer = next(it for it in json.loads(out)["items"] if it["name"] == "optimizer")
    assert optimizer["shape"]["n_params"] == 124439808  # GPT-2 small, 1024 positions
    # RoPE has no table: max_position_embeddings does not bound the sequence
    code, out, err = cli_in_process(capsys, "estimate", _hf(tmp_path, LLAMA), "--gpus", "1",
                                    "--set", "model.seq_len=8192", "--json")
    assert code == 0, err
    # a GPT-2 run with positions set to RoPE explicitly has no table either
    run = _yaml(tmp_path, "model: {hf: gpt2.json, seq_len: 4096, rope: true, "
                          "learned_positions: false}\n")
    code, _, err = cli_in_process(capsys, "estimate", run, "--gpus", "1")
    assert code == 0, err


def test_a_folder_without_config_json_says_so(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = cli_in_process(capsys, "estimate", str(empty))
    line = one_error(code, err, str(empty), "a folder without config.json")
    assert "Is a directory" not in line
    run = _yaml(tmp_path, "model: {hf: empty}\n")
    code, _, err = cli_in_process(capsys, "estimate", run)
    one_error(code, err, "key 'model.hf'", "'empty'", "a folder without config.json")
