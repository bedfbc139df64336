"""`opatlas estimate --search` with a held value no layout can have, and the tensor-parallel
and grouped-query rules, as review s34 found them: the search said only the generic rules
("hold fewer keys") where a --set value was invalid whatever else it chose, and the tp rule
named neither the key at fault nor which number must divide which."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from conftest import cli_in_process, one_error
from opatlas.errors import OpatlasError, SpecError
from opatlas.estimate import load_config
from opatlas.estimate.config import TrainConfig
from opatlas.estimate.search import candidates, search

QWEN_05B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
            "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
            "intermediate_size": 4864, "max_position_embeddings": 32768, "hidden_act": "silu",
            "vocab_size": 151936, "tie_word_embeddings": True}
GQA_TP = ("tp 4 must divide kv_heads 2, the query groups (each tensor-parallel rank takes whole "
          "groups, as Megatron-Core requires; kv heads are not replicated)")
MHA_TP = "tp 3 must divide heads 32 (each tensor-parallel rank takes whole attention heads)"


def _with(name: str, section: str, **fields: object) -> TrainConfig:
    cfg = load_config(name)
    part = getattr(cfg, section)
    return cfg.model_copy(update={section: part.model_copy(update=fields)})


# 8. a held value that no layout can have is said as the --set's error


def test_a_held_ep_on_a_dense_model_is_the_sets_error_in_the_search(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--search", "--gpus", "64",
                                  "--set", "parallel.ep=2")
    one_error(code, err, "In --set, key 'parallel.ep', value 2: no layout of 64 GPUs can hold "
                         "it: ep 2 needs a MoE model (experts > 0)")
    assert "hold fewer keys" not in err


@pytest.mark.parametrize("name, fixed, why", [
    ("llama2-7b", {"parallel.tp": 3}, MHA_TP),
    ("llama2-7b", {"parallel.pp": 64}, "pp 64 exceeds the 32 layers"),
    ("llama2-7b", {"parallel.virtual_stages": 3}, "virtual_stages 3 must divide layers 32"),
    ("llama2-7b", {"parallel.virtual_stages": 32},
     "virtual_stages 32 needs pp >= 2 (the interleaved schedule), so pp·virtual_stages >= 64 "
     "layers; the model has 32"),
    ("llama2-7b", {"training.micro_batch": 3},
     "micro_batch 3 must divide global_batch 1024 (dp·micro_batch must); --set "
     "training.global_batch=768"),
    ("llama2-7b", {"training.micro_batch": 8192}, "micro_batch 8192 × seq_len 4096 tokens exceeds"),
    ("mixtral-8x7b", {"parallel.ep": 3}, "ep 3 must divide experts 8"),
    ("llama2-7b", {"parallel.zero": 1, "parallel.ep": 2}, "ep 2 needs a MoE model"),
])
def test_a_value_no_layout_can_hold_names_its_key_and_rule(name, fixed, why):
    with pytest.raises(SpecError) as info:
        search(load_config(name), 64, fixed=fixed)
    bad = next(k for k in fixed if k != "parallel.zero")
    assert (info.value.file, info.value.key, info.value.value) == ("--set", bad, fixed[bad])
    assert "no layout of 64 GPUs can hold it: " + why in str(info.value)


def test_a_held_tp_that_splits_no_query_groups_is_named_in_the_search(capsys, tmp_path):
    cfg = tmp_path / "qwen.json"
    cfg.write_text(json.dumps(QWEN_05B))
    code, _, err = cli_in_process(capsys, "estimate", str(cfg), "--search", "--gpus", "8",
                                  "--set", "parallel.tp=4")
    one_error(code, err, "In --set, key 'parallel.tp', value 4", GQA_TP)


@pytest.mark.parametrize("fixed, why, sets", [
    ({"parallel.schedule": "interleaved", "parallel.pp": 1},
     "Megatron-LM's interleaved schedule needs pp > 1",
     "--set parallel.schedule=interleaved and --set parallel.pp=1 cannot both hold"),
    ({"parallel.schedule": "gpipe", "parallel.virtual_stages": 2},
     "virtual_stages 2 needs schedule: interleaved (gpipe runs one chunk)",
     "--set parallel.schedule=gpipe and --set parallel.virtual_stages=2 cannot both hold"),
    ({"parallel.schedule": "interleaved", "parallel.virtual_stages": 1},
     "the interleaved schedule needs virtual_stages >= 2",
     "--set parallel.schedule=interleaved and --set parallel.virtual_stages=1 cannot both hold"),
])
def test_two_held_schedule_values_that_conflict_are_both_named(fixed, why, sets):
    with pytest.raises(OpatlasError) as info:
        search(load_config("llama2-7b"), 64, fixed=fixed)
    assert f"{why}: {sets}" in str(info.value)


def test_a_held_value_no_searched_layout_has_on_its_own_is_named():
    """dp 1 of 512 GPUs: tp within a node (8) times pp within the 32 layers is 256 at most."""
    cfg = load_config("llama2-7b")
    assert candidates(cfg, 512)
    with pytest.raises(OpatlasError) as info:
        search(cfg, 512, fixed={"parallel.dp": 1})
    assert "no layout the search builds holds --set parallel.dp=1 even on its own" \
        in str(info.value)


def test_held_values_a_layout_can_have_still_search():
    assert {c.parallel.ep for c in candidates(load_config("mixtral-8x7b"), 64,
                                              {"parallel.ep": 8})} == {8}
    assert {c.parallel.tp for c in candidates(load_config("llama2-7b"), 64,
                                              {"parallel.tp": 16})} == {16}


# 9. the tensor-parallel and grouped-query rules: which number must divide which, at the key
#    of the value at fault


def test_the_tp_rule_is_reported_at_parallel_tp_with_the_query_groups_named():
    cfg = _with("llama2-7b", "model", kv_heads=8).model_dump()
    with pytest.raises(ValidationError) as info:
        TrainConfig.model_validate({**cfg, "parallel": {**cfg["parallel"], "tp": 16}})
    err = info.value.errors()[0]
    assert err["loc"] == ("parallel", "tp") and err["input"] == 16
    assert err["msg"] == ("tp 16 must divide kv_heads 8, the query groups (each tensor-parallel "
                          "rank takes whole groups, as Megatron-Core requires; kv heads are not "
                          "replicated)")


def test_a_set_tp_that_splits_no_query_groups_is_blamed_on_the_set(capsys, tmp_path):
    cfg = tmp_path / "qwen.json"
    cfg.write_text(json.dumps(QWEN_05B))
    code, _, err = cli_in_process(capsys, "estimate", str(cfg), "--gpus", "8",
                                  "--set", "parallel.tp=4")
    line = one_error(code, err, "In --set, key 'parallel.tp', value 4: " + GQA_TP)
    assert "qwen.json" not in line


def test_a_set_tp_that_splits_no_heads_is_blamed_on_the_set(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--set", "parallel.tp=3")
    one_error(code, err, "In --set, key 'parallel.tp', value 3: " + MHA_TP)


def test_a_files_tp_is_named_with_its_key(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text("model: {layers: 2, hidden: 256, heads: 8, kv_heads: 2, seq_len: 128}\n"
                   "training: {global_batch: 8}\nparallel: {dp: 1, tp: 4}\n")
    with pytest.raises(SpecError) as info:
        load_config(cfg)
    assert (info.value.key, info.value.value) == ("parallel.tp", 4)
    assert info.value.detail.startswith("tp 4 must divide kv_heads 2, the query groups")


def test_kv_heads_that_do_not_divide_the_heads_are_named_at_model_kv_heads(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--set", "model.kv_heads=3")
    one_error(code, err, "In --set, key 'model.kv_heads', value 3: kv_heads 3 must divide heads "
                         "32 (each key/value head serves an equal group of query heads)")
