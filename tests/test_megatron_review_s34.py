"""Megatron-LM arguments, review s34: a launcher's GPUs per node against a cluster preset,
which flags are refused and which are notes, --analytical against --set ops.mode=data, and
head, query-group and tensor-parallel errors named by the Megatron flags."""

from __future__ import annotations

import json

import pytest

from conftest import cli_in_process, one_error
from opatlas.errors import SpecError
from opatlas.estimate.megatron import megatron_config

BASE = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 32 --seq-length 2048 "
        "--micro-batch-size 4 --global-batch-size 512 --bf16 --vocab-size 50304 "
        "--use-flash-attn")
LAUNCHED = ("torchrun --nnodes 4 --nproc-per-node 4 pretrain_gpt.py --num-layers 24 "
            "--hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 4 "
            "--global-batch-size 512 --bf16 --vocab-size 50304 --use-flash-attn "
            "--use-distributed-optimizer")


def _dp_comm(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[float, str]:
    code, out, err = cli_in_process(capsys, "estimate", "--megatron-args", LAUNCHED, "--json",
                                    *args)
    assert code == 0, err
    return json.loads(out)["breakdown"]["dp_comm"], err


# --- defect 3: the launcher's --nproc-per-node wins over a preset ---------------------------

def test_a_preset_keeps_the_launchers_gpus_per_node(capsys):
    alone, _ = _dp_comm(capsys)
    preset, err = _dp_comm(capsys, "--set", "cluster.preset=dgx-h100")
    # 4 GPUs a node on both: the preset's links are the defaults', so the same reduction
    assert preset == pytest.approx(alone) == pytest.approx(0.0376074, rel=1e-5)
    assert "the launcher's --nproc-per-node 4, kept over a cluster preset's" in err
    assert "(given explicitly: gpus_per_node = 4)" in err
    assert "gpus_per_node = 8" not in err


@pytest.mark.parametrize("override", [("--gpus-per-node", "8"),
                                      ("--set", "cluster.gpus_per_node=8")])
def test_an_explicit_gpus_per_node_still_replaces_the_launchers(capsys, override):
    eight, err = _dp_comm(capsys, "--set", "cluster.preset=dgx-h100", *override)
    assert eight == pytest.approx(0.0191037, rel=1e-5)
    assert "(given explicitly: gpus_per_node = 8)" in err


def test_a_launcher_of_zero_gpus_per_node_is_named(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "--megatron-args",
                                  LAUNCHED.replace("--nproc-per-node 4", "--nproc-per-node 0"))
    one_error(code, err, "--nproc-per-node", "'0'", "expected an integer >= 1")


# --- defect 5: refused vs noted flags -------------------------------------------------------

SPEED_ONLY = ("--tp-comm-overlap", "--rotary-percent 0.5", "--overlap-param-gather",
              "--moe-grouped-gemm", "--moe-token-dispatcher-type alltoall", "--manual-gc",
              "--no-masked-softmax-fusion", "--spec local")


def test_flags_of_how_the_model_runs_are_notes_and_strict_refuses_them():
    run = megatron_config(f"{BASE} {' '.join(SPEED_ONLY)}", gpus=8)
    assert run.not_modelled == [f.split()[0][2:] for f in SPEED_ONLY]
    for flag in SPEED_ONLY:
        with pytest.raises(SpecError, match="strict mode") as info:
            megatron_config(f"{BASE} {flag}", gpus=8, strict=True)
        assert info.value.key == flag.split()[0]


def test_a_custom_layer_spec_is_refused(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "--gpus", "8", "--megatron-args",
                                  f"{BASE} --spec my_pkg.specs build_spec")
    one_error(code, err, "'--spec'", "'my_pkg.specs build_spec'", "custom layer spec",
              "refuses to estimate a different run")


# --- defect 6: --analytical against --set ops.mode=data -------------------------------------

@pytest.mark.parametrize("item", ["ops.mode=data", "cluster.nccl_data=bundled"])
def test_analytical_and_a_set_asking_for_data_contradict(capsys, item):
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--analytical", "--set",
                                    item, "--set", "cluster.device=A100")
    one_error(code, err, "--analytical", f"--set {item}", "contradict each other")
    assert out == ""


@pytest.mark.parametrize("item", ["ops.mode=data", "cluster.nccl_data=bundled"])
def test_analyze_refuses_the_same_contradiction(capsys, item):
    code, _, err = cli_in_process(capsys, "analyze", "llama2-7b", "--analytical", "--set",
                                    item, "--json")
    one_error(code, err, "--analytical", f"--set {item}", "contradict each other")


def test_analyze_keeps_the_launchers_gpus_per_node_over_a_preset(capsys):
    code, out, err = cli_in_process(capsys, "analyze", "--megatron-args", LAUNCHED, "--set",
                                    "cluster.preset=dgx-h100", "--json")
    assert code == 0, err
    assert "the launcher's --nproc-per-node 4, kept over a cluster preset's" in err
    dp = [r for r in json.loads(out)["rows"] if r["op"] == "all_gather"
          or r.get("category") == "dp_comm"]
    assert dp and "gpus_per_node = 8" not in err


def test_analytical_with_set_ops_mode_analytical_is_no_contradiction(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--analytical", "--set",
                                    "ops.mode=analytical", "--json")
    assert code == 0, err
    assert json.loads(out)["step_time_s"] > 0


# --- defect 9: heads, query groups and tp named by their flags ------------------------------

@pytest.mark.parametrize("extra", ["", " --overlap-grad-reduce"])
def test_heads_not_a_multiple_of_the_query_groups_names_num_query_groups(capsys, extra):
    code, _, err = cli_in_process(capsys, "estimate", "--gpus", "32", "--megatron-args",
                                  f"{BASE} --group-query-attention --num-query-groups 6{extra}")
    one_error(code, err, "key '--num-query-groups', value 6",
              "--num-attention-heads 32 is not a multiple of it")


@pytest.mark.parametrize("extra", ["", " --overlap-grad-reduce"])
def test_query_groups_that_tp_does_not_divide_name_the_real_rule(capsys, extra):
    code, _, err = cli_in_process(capsys, "estimate", "--gpus", "32", "--megatron-args",
                                  f"{BASE} --group-query-attention --num-query-groups 8 "
                                  f"--tensor-model-parallel-size 16{extra}")
    line = one_error(code, err, "key '--tensor-model-parallel-size', value 16",
                     "--num-query-groups 8 is not a multiple of it",
                     "splits the query groups over the tensor-parallel ranks")
    assert "heads 32" not in line


@pytest.mark.parametrize(("extra", "key", "says"), [
    ("--tensor-model-parallel-size 64", "--tensor-model-parallel-size",
     "--num-attention-heads 32 is not a multiple of it"),
    ("--ffn-hidden-size 1000 --tensor-model-parallel-size 16", "--tensor-model-parallel-size",
     "--ffn-hidden-size 1000 is not a multiple of it"),
    ("--model-parallel-size 3", "--model-parallel-size",
     "--num-attention-heads 32 is not a multiple of it"),
    ("--num-experts 1", "--moe-router-topk", "exceeds --num-experts 1"),
    ("--kv-channels 64 --num-attention-heads 8192", "--num-attention-heads",
     "less than or equal to 4096")])
def test_other_model_errors_name_the_megatron_flag(extra, key, says):
    with pytest.raises(SpecError, match=says) as info:
        megatron_config(f"{BASE} {extra}", gpus=192)
    assert info.value.key == key
