"""Bad `opatlas estimate` configs from a new user's review (session 36), in opatlas's own YAML
and in estimate-train-time's: each is one error line naming the file (or the --set), the key
and the value as the user wrote them, exit 2, no traceback; a default is said, and refused
under --strict."""

from __future__ import annotations

import json

import pytest

from conftest import cli_in_process, one_error
from opatlas.estimate.config import read_config

# estimate-train-time's own example (llemma_7b_4_2_2_P), as its users write it
ETT = {"gpu_name": "NVIDIAA100-SXM4-80GB",
       "operator_data_folder": "./regressors/Perlmutter/operator",
       "nccl_data_folder": "./regressors/Perlmutter/nccl",
       "training_config": [4, 2, 2, 4, 32, 4096, 4096, 8, 4],
       "comm_bucket": 1260000000, "encoders": 32,
       "function_list": ["embedding", "RMSlayernorm", "linear1", "RoPE", "flash_atten",
                         "linear2", "linear3", "gelu", "linear4", "linear_final",
                         "parallel_cross_entropy_128", "res_add"],
       "encoder_function_list": ["RMSlayernorm", "linear1", "RoPE", "flash_atten", "linear2",
                                 "RMSlayernorm", "res_add", "linear3", "gelu", "linear4",
                                 "res_add"],
       "layernorm_name": "RMSlayernorm", "fwd_syncs": 2, "bwd_syncs": 2}
MODEL = ("model: {name: t, layers: 32, hidden: 4096, heads: 32, ffn: 11008, ffn_kind: swiglu, "
         "vocab: 32000, seq_len: 4096, norm: rmsnorm, rope: true}\n")


def _ett(tmp_path, name: str = "ett.yml", drop: tuple[str, ...] = (), **changes) -> str:
    """The upstream example with keys changed or dropped, as JSON (YAML upstream reads)."""
    data = {k: v for k, v in {**ETT, **changes}.items() if k not in drop}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _yaml(tmp_path, text: str, name: str = "c.yml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _estimate(capsys, *args: str) -> tuple[int, str, str]:
    return cli_in_process(capsys, "estimate", *args)


# 5. upstream's format: unknown keys and op names are errors, its real keys never are


@pytest.mark.parametrize(("changes", "drop", "key", "value", "why"), [
    ({"layernorm_nme": "RMSlayernorm"}, ("layernorm_name",), "layernorm_nme", "'RMSlayernorm'",
     "unknown key (did you mean 'layernorm_name'?); estimate-train-time's config takes "),
    ({"extra_key": 5}, (), "extra_key", "5", "unknown key; estimate-train-time's config takes"),
])
def test_an_unknown_upstream_key_is_an_error_naming_it(tmp_path, capsys, changes, drop, key,
                                                        value, why):
    path = _ett(tmp_path, drop=drop, **changes)
    line = one_error(*_estimate(capsys, path)[::2], f"In file {path}, key '{key}', value "
                                                    f"{value}: {why}")
    assert "layernorm_name" in line and "save_name" in line  # the keys it does take


def test_an_unknown_op_in_a_function_list_is_named(tmp_path, capsys):
    layer = [f if f != "flash_atten" else "flash_atn" for f in ETT["encoder_function_list"]]
    path = _ett(tmp_path, encoder_function_list=layer)
    one_error(*_estimate(capsys, path)[::2],
              f"In file {path}, key 'encoder_function_list', value 'flash_atn': unknown op "
              f"(did you mean 'flash_atten'?); encoder_function_list takes embedding")


def test_upstream_examples_keys_are_all_taken(tmp_path):
    """Its GH200 example also gives save_folder and save_name (where results were written)."""
    vista = _ett(tmp_path, "llemma_7b_4_2_2_V.yml", save_folder="./results",
                 save_name="llemma_7b_4_2_2_V")
    notes: list[str] = []
    data, _ = read_config(vista, notes)
    assert data["model"]["norm"] == "rmsnorm" and data["model"]["attention"] == "flash"
    assert notes == []
    data, _ = read_config("llemma_7b_4_2_2_P", notes)  # the bundled one, unchanged
    assert data["source"] == "ett" and notes == []


def test_upstream_keys_left_to_defaults_or_unused_are_said_and_strict_refuses(tmp_path,
                                                                               capsys):
    path = _ett(tmp_path, drop=("gpu_name", "comm_bucket"), fwd_syncs=3)
    notes: list[str] = []
    read_config(path, notes)
    assert notes == [
        "gpu_name missing: estimate-train-time's config requires it; assumed gpu_name = "
        "NVIDIAA100-SXM4-80GB",
        "comm_bucket missing: estimate-train-time's config requires it; assumed comm_bucket = "
        "1260000000",
        "fwd_syncs 3 is not used: opatlas times the tensor-parallel all-reduces of the "
        "Megatron-LM layer it models (2 a layer forward, 2 backward)"]
    one_error(*_estimate(capsys, path, "--strict")[::2],
              f"In file {path}, key 'gpu_name': missing", "--strict refuses it")


# 6. a value of the wrong type is an error, not a traceback


def test_a_non_string_layernorm_name_is_an_error(tmp_path, capsys):
    path = _ett(tmp_path, layernorm_name=5)
    one_error(*_estimate(capsys, path)[::2], f"In file {path}, key 'layernorm_name', value 5: "
                                             f"unknown norm; layernorm_name takes RMSlayernorm, "
                                             f"layernorm")


# 7. errors in upstream files name its keys and the values written


@pytest.mark.parametrize(("entry", "value", "key", "why"), [
    (7, "x", "training_config.steps_per_update", "value 'x': expected an integer >= 1"),
    (2, -2, "training_config.dp", "value -2: expected an integer >= 1"),
    (1, 3, "training_config.mp", "value 3: tp 3 must divide heads 32"),
])
def test_upstream_errors_name_its_keys_and_values(tmp_path, capsys, entry, value, key, why):
    training = list(ETT["training_config"])
    training[entry] = value
    path = _ett(tmp_path, training_config=training)
    line = one_error(*_estimate(capsys, path)[::2], f"In file {path}, key '{key}', {why}")
    assert "global_batch" not in line and "parallel.tp" not in line


def test_an_upstream_rule_across_keys_names_them_as_the_file_does(tmp_path, capsys):
    path = _ett(tmp_path, training_config=[64, 2, 2, 4, 32, 4096, 4096, 8, 4])
    one_error(*_estimate(capsys, path)[::2], f"In file {path}: training_config.pp=64 · "
                                             f"parallel.virtual_stages=1 exceeds encoders=32")


def test_a_set_on_an_upstream_file_keeps_its_own_name(capsys):
    one_error(*_estimate(capsys, "llemma_7b_4_2_2_P", "--set", "parallel.tp=3")[::2],
              "In --set, key 'parallel.tp', value 3: tp 3 must divide heads 32")
    line = one_error(*_estimate(capsys, "llemma_7b_4_2_2_P", "--set", "parallel.pp=64")[::2],
                     "parallel.pp=64 · parallel.virtual_stages=1 exceeds encoders=32",
                     "(with --set parallel.pp=64)")
    assert "training_config.pp" not in line


# 8. rules across keys name every key and its value


@pytest.mark.parametrize(("text", "needle"), [
    (MODEL + "training: {global_batch: 1024}\nparallel: {dp: 1, tp: 1, pp: 64}\n",
     ": parallel.pp=64 · parallel.virtual_stages=1 exceeds model.layers=32"),
    (MODEL + "training: {global_batch: 1000, micro_batch: 2}\nparallel: {dp: 8}\n",
     ": training.global_batch=1000 is not a multiple of parallel.dp=8 · "
     "training.micro_batch=2 = 16"),
    (MODEL.replace("11008", "11001") + "training: {global_batch: 1024}\nparallel: {tp: 2}\n",
     ", key 'parallel.tp', value 2: model.ffn 11001 not divisible by tp 2"),
    (MODEL + "training: {global_batch: 1024}\nparallel: {dp: 2, ep: 2}\n",
     ", key 'parallel.ep', value 2: ep 2 needs a MoE model (experts > 0); model.experts=0"),
    (MODEL.replace("rope: true", "rope: true, experts: 8, top_k: 9")
     + "training: {global_batch: 1024}\n",
     ", key 'model.top_k', value 9: model.top_k=9 must be from 1 to model.experts=8"),
    (MODEL.replace("rope: true", "rope: true, experts: 8, top_k: 2")
     + "training: {global_batch: 1024}\nparallel: {dp: 2, ep: 4}\n",
     ", key 'parallel.ep', value 4: ep 4 must divide both experts 8 and dp 2 (model.experts, "
     "parallel.dp"),
])
def test_a_rule_across_keys_names_its_keys_and_values(tmp_path, capsys, text, needle):
    path = _yaml(tmp_path, text)
    one_error(*_estimate(capsys, path)[::2], f"In file {path}{needle}")


def test_a_rule_broken_by_a_set_names_the_set(capsys):
    one_error(*_estimate(capsys, "mixtral-8x7b", "--set", "parallel.ep=3")[::2],
              "In --set, key 'parallel.ep', value 3: ep 3 must divide both experts 8")
    one_error(*_estimate(capsys, "mixtral-8x7b", "--set", "model.experts=1")[::2],
              "key 'model.top_k'", "(with --set model.experts=1)")


# 9. a device the ops cannot be timed on is the config's error, said before any note


def test_an_unknown_device_names_the_file_or_the_set_before_any_note(tmp_path, capsys):
    path = _yaml(tmp_path, MODEL + "training: {global_batch: 1024}\nparallel: {dp: 8}\n"
                                   "cluster: {device: H900}\n")
    code, _, err = _estimate(capsys, path)
    one_error(code, err, f"In file {path}, key 'cluster.device', value 'H900': cluster.device "
                         f"'H900' is not in the device catalog")
    assert "note:" not in err
    code, _, err = _estimate(capsys, "llama2-7b", "--set", "cluster.device=H900")
    one_error(code, err, "In --set, key 'cluster.device', value 'H900'")
    assert "note:" not in err


def test_an_upstream_device_the_roofline_lacks_names_gpu_name(tmp_path, capsys):
    path = _ett(tmp_path, gpu_name="NVIDIAH900")
    one_error(*_estimate(capsys, path)[::2],
              f"In file {path}, key 'gpu_name', value 'NVIDIAH900': the op data bundled has no "
              f"fp16 samples for device 'NVIDIAH900'")
    one_error(*_estimate(capsys, path, "--analytical")[::2],
              f"In file {path}, key 'gpu_name', value 'NVIDIAH900'", "roofline (--analytical)")


# 10. --strict refuses the defaults it would assume, and the substitutes it would time


def test_strict_refuses_assumed_defaults(tmp_path, capsys):
    path = _yaml(tmp_path, MODEL + "training: {global_batch: 1024.0}\nparallel: {dp: 8.0}\n")
    code, _, err = _estimate(capsys, path)
    assert code == 0 and "note: assumed (the defaults) cluster.device = H100" in err, err
    one_error(*_estimate(capsys, path, "--strict")[::2],
              f"In file {path}: assumed (the defaults) training.dtype = bf16, "
              f"training.micro_batch = 1; --set training.KEY=VALUE (--strict refuses defaults")


def test_strict_refuses_what_analytical_assumes(capsys):
    one_error(*_estimate(capsys, "llemma_7b_4_2_2_P", "--analytical", "--strict")[::2],
              "In --analytical: assumed (the defaults) ops.compute_efficiency = 0.7",
              "--strict refuses defaults")


def test_strict_refuses_a_reduce_scatter_derived_from_all_reduce(capsys):
    code, _, err = _estimate(capsys, "llemma_7b_4_2_2_P", "--json")
    assert code == 0 and "reduce_scatter is timed as half the measured all_reduce" in err
    one_error(*_estimate(capsys, "llemma_7b_4_2_2_P", "--strict")[::2],
              "ops.strict: no reduce-scatter samples in", "drop --strict")


# 12. the interleaved schedule needs a pipeline


def test_the_interleaved_schedule_without_a_pipeline_is_refused(capsys):
    one_error(*_estimate(capsys, "llama2-7b", "--set", "parallel.schedule=interleaved",
                         "--set", "parallel.virtual_stages=2", "--set", "parallel.pp=1")[::2],
              "parallel.schedule=interleaved needs parallel.pp > 1, not 1",
              "--set parallel.pp=1")


# 13. top_k means nothing without experts


def test_top_k_on_a_dense_model_is_refused(capsys):
    one_error(*_estimate(capsys, "llama2-7b", "--set", "model.top_k=2")[::2],
              "In --set, key 'model.top_k', value 2: model.top_k=2 has no effect without "
              "experts (model.experts=0)")
