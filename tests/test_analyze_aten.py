"""Profiled aten calls mapped to catalog ops, FLOPs by hand."""

from __future__ import annotations

import pytest

from opatlas.analyze.aten import map_op


def _m(name, *dims, dtype="float"):
    return map_op(name, {"Input Dims": list(dims), "Input type": [dtype] * len(dims)})


def test_gemms():
    lin = _m("aten::linear", [2, 32, 64], [192, 64], [192])
    assert (lin.op, lin.shape) == ("linear", {"batch": 1, "M": 64, "K": 64, "N": 192})
    assert lin.flops == 2 * 64 * 64 * 192 + 64 * 192 and lin.gemms == [(1, 64, 64, 192)]
    assert lin.bytes == 4 * (64 * 64 + 64 * 192 + 64 * 192)
    assert _m("aten::addmm", [192], [64, 64], [64, 192]).flops == lin.flops
    assert _m("aten::mm", [64, 256], [256, 64], dtype="c10::BFloat16").bytes == \
        2 * (64 * 256 + 256 * 64 + 64 * 64)
    assert _m("aten::bmm", [8, 32, 16], [8, 16, 32]).flops == 2 * 8 * 32 * 16 * 32
    assert _m("aten::baddbmm", [8, 32, 32], [8, 32, 16], [8, 16, 32]).shape == \
        {"batch": 8, "M": 32, "K": 16, "N": 32}
    mm = _m("aten::matmul", [2, 4, 32, 16], [2, 4, 16, 32])  # batched, broadcast dims folded
    assert mm.shape == {"batch": 8, "M": 32, "K": 16, "N": 32}
    assert _m("aten::matmul", [2, 32, 64], [64, 10]).shape == {"batch": 1, "M": 64, "K": 64,
                                                                "N": 10}


def test_attention_layouts_agree():
    sdpa = _m("aten::scaled_dot_product_attention", [2, 4, 128, 16], [2, 4, 256, 16],
              [2, 4, 256, 16])
    assert sdpa.flops == 2 * 2 * 4 * 128 * 256 * (16 + 16)
    flash = _m("flash_attn::_flash_attn_forward", [2, 128, 4, 16], [2, 256, 4, 16],
               [2, 256, 4, 16])
    assert flash.flops == sdpa.flops and flash.shape == sdpa.shape
    bwd = _m("aten::_scaled_dot_product_flash_attention_for_cpu_backward", [2, 4, 128, 16],
             [2, 4, 128, 16], [2, 4, 256, 16], [2, 4, 256, 16])
    assert bwd.pass_ == "bwd" and bwd.flops == pytest.approx(2.5 * sdpa.flops)


def test_rowwise_and_unknown():
    ln = _m("aten::native_layer_norm_backward", [64, 512], [64, 512])
    assert (ln.op, ln.pass_, ln.shape) == ("layernorm", "bwd", {"rows": 64, "width": 512})
    assert _m("aten::gelu", [64, 256]).op == "gelu"
    assert _m("aten::_softmax", [256, 32], [], []).op == "softmax"
    assert _m("aten::view", [64, 256], []) is None
    res = _m("aten::add", [2, 32, 64], [2, 32, 64], [])
    assert (res.op, res.bytes) == ("residual_add", 3 * 4 * 2 * 32 * 64)
    assert _m("aten::add", [2, 32, 64], [], []) is None  # a scalar add: not a residual
    assert _m("aten::linear", [], []) is None  # no shapes: not counted, an "other" row
