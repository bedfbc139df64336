"""Training-step estimator, after the s36 review: memory is the fullest pipeline stage's (the
last stage's logits, an uneven split's middle stages), fp32 training moves 4-byte activations
and parameters, a data-parallel group of one rank has no calls or buckets, and memory that was
not checked does not "fit"."""

from __future__ import annotations

import json
import math

import pytest

from conftest import cli_in_process
from opatlas.errors import OpatlasError
from opatlas.estimate import engine, estimate_step, load_config
from opatlas.estimate.config import TrainConfig
from opatlas.estimate.overrides import apply_overrides
from opatlas.estimate.pipeline import Schedule
from opatlas.estimate.search import search

GiB = 2**30
MiB = 2**20


def _cfg(name: str, *sets: str) -> TrainConfig:
    base = load_config(name).model_dump()
    return TrainConfig.model_validate(apply_overrides(base, list(sets)))


def _items(est, category: str) -> dict[str, object]:
    return {it.name: it for it in est.items if it.category == category}


# -- 1. pp > 1: the last stage's logits are counted ---------------------------------------
BIG_VOCAB = ("model.vocab=256000", "parallel.pp=2", "parallel.dp=32", "parallel.tp=1",
             "parallel.sequence_parallel=false", "parallel.recompute=full",
             "training.micro_batch=16")


def test_last_stage_holds_the_logits_and_is_out_of_memory():
    e = estimate_step(_cfg("llama2-7b", *BIG_VOCAB))
    # last stage: 16 layers of 202,383,360 parameters and the head (4096 x 256,000 + the
    # final norm's 4096) = 4,286,713,856 parameters
    params = 16 * 202_383_360 + 4096 * 256_000 + 4096
    assert params == 4_286_713_856
    assert e.memory_stage == 1 and e.as_json()["memory_stage"] == 1
    assert e.memory.weights == pytest.approx(2 * params)  # 7.985 GiB
    assert e.memory.gradients == pytest.approx(2 * params)
    assert e.memory.optimizer == pytest.approx(12 * params / 32)  # 1.497 GiB, ZeRO-1
    # 16 layers x 1 micro-batch in flight x the layer input, 2·s·b·h = 0.5 GiB
    assert e.memory.activations == pytest.approx(16 * 1 * 2 * 4096 * 16 * 4096)
    assert e.memory.activations / GiB == pytest.approx(8.0)
    assert e.memory.other == pytest.approx(4 * 16 * 4096 * 256_000)  # fp32 logits, 62.5 GiB
    assert e.memory_gib == pytest.approx(87.966, abs=1e-3)
    assert e.memory_limit_gib == pytest.approx(78.0) and e.fits is False


def test_search_refuses_the_layout_whose_last_stage_does_not_fit():
    fixed = {"parallel.pp": 2, "parallel.tp": 1, "training.micro_batch": 16,
             "parallel.recompute": "full", "parallel.zero": 1, "parallel.schedule": "1f1b",
             "parallel.sequence_parallel": False}
    cfg = _cfg("llama2-7b", "model.vocab=256000")
    with pytest.raises(OpatlasError, match="none of the 1 layouts"):
        search(cfg, 64, fixed=fixed)


# -- 3. an uneven split: the middle stage's layers and in-flight micro-batches ---------
@pytest.mark.filterwarnings("ignore:model.layers 80 do not split evenly")
def test_uneven_split_checks_the_fullest_stage_activations():
    e = estimate_step(_cfg("llama2-70b", "parallel.schedule=1f1b", "parallel.virtual_stages=1",
                           "parallel.pp=32", "parallel.dp=1", "parallel.recompute=full"))
    assert e.stages == [2] * 8 + [3] * 16 + [2] * 8
    layer_input = 2 * 4096 * 1 * 8192 / 8  # 2·s·b·h/t with sequence parallelism: 8 MiB
    assert layer_input == 8_388_608
    # stage 8: 3 layers x (32 - 8) micro-batches in flight; stage 0 had 2 x 32
    assert e.memory_stage == 8
    assert e.memory.activations == pytest.approx(3 * 24 * layer_input)
    assert e.memory.activations / GiB == pytest.approx(0.5625)


@pytest.mark.parametrize(("name", "p", "m", "v", "stage", "held"), [
    ("1f1b", 32, 1024, 1, 8, 24), ("1f1b", 4, 8, 1, 3, 1), ("1f1b", 8, 3, 1, 2, 3),
    ("gpipe", 4, 8, 1, 3, 8),
    # Megatron-LM's warm-up, (p - s - 1)·2 + (v - 1)·p chunks, plus one; a chunk is 1/v
    ("interleaved", 4, 8, 2, 0, (3 * 2 + 4 + 1) / 2), ("interleaved", 4, 8, 2, 3, (4 + 1) / 2),
    ("interleaved", 4, 4, 2, 0, 4)])  # never more than the micro-batches there are
def test_micro_batches_in_flight_per_stage(name, p, m, v, stage, held):
    assert Schedule(name, p, m, v).in_flight(stage) == pytest.approx(held)


# -- 2. fp32 training: 4-byte activations and parameters on the wire ----------------------
def test_fp32_training_sends_four_byte_activations_and_parameters():
    e = estimate_step(_cfg("llama2-7b", "training.dtype=fp32"))
    assert _items(e, "tp_comm")["all_reduce"].shape["bytes"] == 4 * 1 * 4096 * 4096
    gather = _items(e, "dp_comm")["all_gather"]
    assert gather.shape["bytes"] == 4 * 3_369_338_880  # 13,477,355,520
    assert gather.shape["bytes"] == _items(e, "dp_comm")["reduce_scatter"].shape["bytes"]


def test_fp32_pipeline_sends_and_expert_all_to_alls_are_four_bytes():
    e = estimate_step(_cfg("mixtral-8x7b", "parallel.ep=8", "training.dtype=fp32"))
    p = e.config.parallel
    assert (p.tp, p.pp, p.sequence_parallel, e.config.training.micro_batch) == (4, 4, True, 1)
    # the activation (4 B x 1 x 4096 x 4096), 1/tp of it per rank
    assert _items(e, "p2p")["p2p"].shape["bytes"] == 4 * 4096 * 4096 / 4
    # each of a rank's 4096/tp tokens sent to its top 2 experts, 4 B x 4096 wide
    assert _items(e, "ep_comm")["all_to_all"].shape["bytes"] == 4 * (4096 / 4) * 2 * 4096


# -- 4. MoE, ep = dp: the experts' group of one rank has no calls and no buckets ----------
def test_one_rank_expert_group_adds_no_calls_or_buckets():
    e = estimate_step(_cfg("mixtral-8x7b", "parallel.ep=8"))
    p = e.config.parallel
    assert p.dp // p.ep == 1 and p.zero == 1 and p.dp_overlap
    grads, params = _items(e, "dp_comm")["reduce_scatter"], _items(e, "dp_comm")["all_gather"]
    # busiest device (tp 4, ep 8, 8 layers): 116,786,176 dense parameters over dp 8 and
    # 8·8·3·4096·14,336/(4·8) = 352,321,536 experts' over dp/ep = 1 rank, 2 bytes each; only
    # the dense group's gradients move: ceil(233,572,352 B / 25 MiB) = 9 buckets
    assert grads.shape["bytes"] == 2 * (116_786_176 + 352_321_536)  # the shape's whole pass
    assert math.ceil(2 * 116_786_176 / (25 * MiB)) == 9
    assert grads.shape["buckets"] == 9 and grads.calls == 9 and params.calls == 9
    # the last of the 9 buckets stays exposed: 2.674 ms / 9 (was 1/36 of it)
    total = grads.time_s + grads.shape["overlapped_s"]
    assert total == pytest.approx(2.674e-3, rel=1e-3)
    assert grads.time_s == pytest.approx(total / 9)
    assert grads.time_s == pytest.approx(2.971e-4, rel=1e-3)


# -- 11. memory not checked: fits is null, and search refuses nothing for it --------------
@pytest.fixture
def unknown_memory(monkeypatch):
    """A device known only from its data: no memory size, so an infinite limit."""
    monkeypatch.setattr(engine, "_memory_limit_gib", lambda c, device: math.inf)


@pytest.mark.filterwarnings("ignore:the memory of")
def test_fits_is_null_when_memory_was_not_checked(unknown_memory, capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["memory_limit_gib"] is None and doc["fits"] is None
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b")
    assert code == 0, err
    assert "not checked: memory size unknown" in out


@pytest.mark.filterwarnings("ignore:the memory of")
def test_search_keeps_a_layout_whose_memory_was_not_checked(unknown_memory):
    fixed = {"parallel.pp": 2, "parallel.tp": 1, "training.micro_batch": 16,
             "parallel.recompute": "full", "parallel.zero": 1, "parallel.schedule": "1f1b",
             "parallel.sequence_parallel": False}
    best, evaluated, oom = search(_cfg("llama2-7b", "model.vocab=256000"), 64, fixed=fixed)
    assert (len(best), evaluated, oom) == (1, 1, 0)
    assert best[0].fits is None and best[0].memory_gib == pytest.approx(87.966, abs=1e-3)
