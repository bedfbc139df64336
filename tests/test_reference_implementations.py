"""Ops timed from measurements of opatlas's own implementation where that differs from the
kernels training stacks run (the ``h100`` sweep's unfused ``masked_softmax`` standing in for
Megatron-LM's fused ``ScaledUpperTriangMaskedSoftmax``; the catalog's expert loop for ``moe``)
are said on stderr and in ``--json`` notes, refused under ``--strict``, and ``ops.roofline``
times them by the roofline instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_in_process, one_error
from opatlas.devices import find_device
from opatlas.estimate.optimes import RooflineTimes, roofline_asked
from opatlas.ops.registry import get_op
from opatlas.predict.predictor import catalog_name

REPO = Path(__file__).resolve().parents[1]
GPT = REPO / "examples" / "validation" / "gpt-1.7b.yml"
FUSED = "ScaledUpperTriangMaskedSoftmax"


@pytest.fixture
def on_h100(tmp_path: Path) -> Path:
    """The 1.7B validation config (unfused attention) on the bundled H100 measurements."""
    text = GPT.read_text().replace("data: bundled", "data: h100")
    text = text.replace("device: NVIDIAA100-SXM4-80GB", "device: H100")
    path = tmp_path / "gpt-h100.yml"
    path.write_text(text)
    return path


def _estimate(capsys, *args: str) -> tuple[dict, str]:
    code, out, err = cli_in_process(capsys, "estimate", *args, "--json")
    assert code == 0, err
    return json.loads(out), err


def _items(est: dict, name: str) -> list[dict]:
    return [i for i in est["items"] if i["name"] == name]


def test_the_catalog_knows_which_ops_differ_and_what_aliases_run():
    assert get_op("masked_softmax")[0].reference_note
    assert get_op("moe")[0].reference_note
    assert not get_op("linear")[0].reference_note
    assert catalog_name(FUSED) == "masked_softmax"
    assert catalog_name("linear3") == "linear"
    assert catalog_name("not_an_op") == "not_an_op"


def test_roofline_names_take_an_op_by_its_name_or_its_catalog_op():
    assert roofline_asked(FUSED, frozenset({"masked_softmax"}))
    assert roofline_asked(FUSED, frozenset({FUSED}))
    assert roofline_asked("linear1", frozenset({"linear"}))
    assert not roofline_asked("linear3", frozenset({"linear1"}))
    assert not roofline_asked("bmm", frozenset({"baddbmm"}))


def test_unfused_softmax_on_h100_data_is_said_and_noted(capsys, on_h100):
    est, err = _estimate(capsys, str(on_h100))
    warned = [ln for ln in err.splitlines() if FUSED in ln and "warning" in ln]
    assert len(warned) == 1, err
    assert "opatlas's masked_softmax" in warned[0] and "ops.roofline" in warned[0]
    assert any(n.startswith(f"op {FUSED} is timed from measurements") for n in est["notes"])


def test_upstream_fused_samples_are_not_a_stand_in(capsys):
    """The bundled A100 samples file Megatron-LM's own kernel under its own name."""
    est, err = _estimate(capsys, str(GPT))
    assert "opatlas's masked_softmax" not in err
    assert not any("measurements of opatlas" in n for n in est["notes"])
    # its optimizer samples are filed at the training dtype: no fp32 stand-in either
    assert not any("fp32 measurements" in n for n in est["notes"])
    assert est["breakdown"]["optimizer"] > 0


def test_strict_refuses_the_stand_in_naming_it(capsys, on_h100):
    code, _, err = cli_in_process(capsys, "estimate", str(on_h100), "--strict",
                                  # the defaults the config leaves, stated; collectives
                                  # given samples (refused later, the ops' stand-in first)
                                  "--set", "model.ffn=9216", "--set", "parallel.bucket_mb=25",
                                  "--set", "cluster.nccl_data=bundled")
    one_error(code, err, FUSED, "masked_softmax", "ops.roofline")


def test_ops_roofline_times_it_by_the_roofline_exactly(capsys, on_h100):
    data, _ = _estimate(capsys, str(on_h100))
    est, err = _estimate(capsys, str(on_h100), "--set", "ops.roofline=[masked_softmax]")
    assert "opatlas's masked_softmax" not in err
    assert f"op {FUSED}/fwd is timed by the roofline (ops.roofline)" in est["notes"]
    h100 = find_device("H100")
    roof = RooflineTimes(h100, "fp16", 0.7, 0.8)
    for item in _items(est, FUSED):
        shape = {k: [v] for k, v in item["shape"].items()}
        pass_ = "fwd" if item["pass"] == "recompute" else item["pass"]
        want = float(roof(FUSED, shape, pass_)[0]) * item["calls"]
        assert item["time_s"] == pytest.approx(want, rel=1e-9)
    # the fused kernel's least traffic is far below three unfused passes over the scores
    fused = sum(i["time_s"] for i in _items(est, FUSED))
    unfused = sum(i["time_s"] for i in _items(data, FUSED))
    assert fused < unfused / 2
    assert est["step_time_s"] == pytest.approx(data["step_time_s"] - unfused + fused, rel=1e-9)


def test_an_unknown_op_in_ops_roofline_is_one_error(capsys, on_h100):
    code, _, err = cli_in_process(capsys, "estimate", str(on_h100), "--set",
                                  "ops.roofline=[maskedsoftmax]")
    one_error(code, err, "ops.roofline", "maskedsoftmax", "masked_softmax")


def test_experts_on_catalog_data_are_said(capsys, tmp_path):
    cfg = tmp_path / "moe.yml"
    cfg.write_text(
        "model: {name: tiny-moe, layers: 2, hidden: 4096, heads: 32, kv_heads: 8, ffn: 14336,\n"
        "        ffn_kind: swiglu, experts: 8, top_k: 2, vocab: 32000, seq_len: 4096,\n"
        "        norm: rmsnorm, rope: true}\n"
        "training: {global_batch: 8, micro_batch: 1, dtype: bf16}\n"
        "parallel: {dp: 8, tp: 1, pp: 1}\n"
        "cluster: {device: H100, gpus_per_node: 8}\n"
        "ops: {mode: data, data: h100}\n")
    est, err = _estimate(capsys, str(cfg))
    assert any("moe is timed from h100's measurements of opatlas's moe" in ln
               for ln in err.splitlines()), err
    assert any(n.startswith("op moe is timed from measurements") for n in est["notes"])


def test_predict_says_an_alias_stand_in_but_not_the_catalog_op(capsys):
    shape = "b=2,h=24,l=2048,mp=1"
    code, out, err = cli_in_process(capsys, "predict", FUSED, "--data", "h100", "--shape", shape)
    assert code == 0 and "opatlas's masked_softmax" in err, err
    alias_fwd = out.splitlines()[0]
    code, out, err = cli_in_process(capsys, "predict", "masked_softmax", "--data", "h100",
                                    "--shape", shape)
    assert code == 0 and "opatlas's masked_softmax" not in err, err
    # the same measurements, so the same time
    assert alias_fwd.split(":")[1] == out.splitlines()[0].split(":")[1]
    code, _, err = cli_in_process(capsys, "predict", FUSED, "--data", "h100", "--strict",
                                  "--shape", shape)
    one_error(code, err, "--strict", FUSED, "masked_softmax")
