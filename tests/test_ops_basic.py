"""The first ops: FLOPs and bytes by hand, forward against float64, backward runs."""

from __future__ import annotations

import pytest
import torch

from opatlas.ops import get_op
from opatlas.ops.registry import resolved_params


def _p(name, **kw):
    return resolved_params(name, kw)


def test_linear_roles_flops_and_bytes_by_hand():
    op, p = _p("linear", b=2, l=8, dim=64, mp=2, role="ffn_down", dtype="bf16")
    # tokens 16, in = 4*64/2 = 128, out = 64
    assert op.flops(p) == {"fwd": 2 * 16 * 128 * 64, "bwd": 4 * 16 * 128 * 64}
    # bwd: dx = dy·Wᵀ reads dy (16·64) and W, writes dx; dW = xᵀ·dy reads x and dy, writes dW
    assert op.min_bytes(p) == {"fwd": 2 * (16 * 128 + 128 * 64 + 16 * 64),
                               "bwd": 2 * (2 * 16 * 128 + 2 * 128 * 64 + 2 * 16 * 64)}
    _, p = _p("linear", b=1, l=4, dim=64, mp=4, role="vocab", vocab=50257)
    # 50257 padded to a multiple of 128*4 = 512 -> 50688, per shard 12672
    assert op.features(p) == {"tokens": 4, "in_features": 64, "out_features": 12672}
    _, p = _p("linear1", b=1, l=4, dim=64, mp=4)
    assert op.features(p)["out_features"] == 48


def test_bmm_softmax_layernorm_gelu_flops_by_hand():
    bmm, p = _p("bmm", mp=2, b=2, h=4, l=16, dim=64)  # batch 4, M=N=16, K=16
    assert bmm.flops(p)["fwd"] == 2 * 4 * 16 * 16 * 16
    assert bmm.min_bytes(p)["fwd"] == 4 * 4 * (16 * 16 * 3)
    assert bmm.min_bytes(p)["bwd"] == 2 * 4 * 4 * (16 * 16 * 3)  # two kernels, each reads dC
    sm, p = _p("softmax", mp=2, b=1, h=4, l=8)  # (1, 2, 8, 8) -> 128 elements
    assert sm.flops(p) == {"fwd": 5 * 128, "bwd": 4 * 128}
    assert sm.min_bytes(p) == {"fwd": 4 * 2 * 128, "bwd": 4 * 3 * 128}
    ln, p = _p("layernorm", b=2, l=3, dim=10)
    assert ln.flops(p)["fwd"] == 8 * 60
    assert ln.min_bytes(p)["fwd"] == 4 * (2 * 60 + 20)
    ge, p = _p("gelu", mp=2, b=1, l=4, dim=8)  # (4, 4*8/2=16)
    assert ge.flops(p)["fwd"] == 8 * 64
    fa, p = _p("flash_attention", mp=1, b=1, h=2, l=8, dim=16, causal=0)
    assert fa.flops(p) == {"fwd": 4 * 1 * 2 * 8 * 8 * 8, "bwd": 2.5 * 4 * 2 * 8 * 8 * 8}


REFERENCES = {
    "linear": lambda s: torch.nn.functional.linear(s[0].double(), s[1].double()),
    "bmm": lambda s: torch.bmm(s[0].double(), s[1].double()),
    "layernorm": lambda s: torch.nn.functional.layer_norm(
        s[0].double(), (s[0].shape[-1],), s[1].double(), s[2].double()),
    "softmax": lambda s: torch.exp(s.double()) / torch.exp(s.double()).sum(-1, keepdim=True),
    "gelu": lambda s: 0.5 * s.double() * (1 + torch.tanh(
        (2 / torch.pi) ** 0.5 * (s.double() + 0.044715 * s.double() ** 3))),
    "flash_attention": lambda s: torch.softmax(
        (s[0].double() @ s[1].double().transpose(-1, -2)) / s[0].shape[-1] ** 0.5
        + torch.triu(torch.full((s[0].shape[2],) * 2, float("-inf"), dtype=torch.float64), 1),
        -1) @ s[2].double(),
}
SHAPES = {
    "linear": {"b": 2, "l": 8, "dim": 32, "mp": 2, "role": "out"},
    "bmm": {"b": 2, "h": 4, "l": 8, "dim": 32},
    "layernorm": {"b": 2, "l": 8, "dim": 32},
    "softmax": {"b": 2, "h": 4, "l": 8},
    "gelu": {"b": 2, "l": 8, "dim": 16},
    "flash_attention": {"b": 2, "h": 4, "l": 16, "dim": 64},
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_forward_matches_float64_reference_and_backward_runs(name):
    torch.manual_seed(0)
    op, p = _p(name, **SHAPES[name], dtype="fp32")
    state = op.build(p, "cpu")
    out = op.forward(state)
    torch.testing.assert_close(out.double(), REFERENCES[name](state), rtol=1e-4, atol=1e-5)
    prepared = op.prepare(state, "bwd")
    op.execute(state, "bwd", prepared)
    leaves = state if isinstance(state, tuple) else (state,)
    grads = [t.grad for t in leaves if isinstance(t, torch.Tensor)]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_invalid_reasons():
    op, _ = get_op("flash_attention")
    assert op.invalid_reason(op.resolve({"b": 1, "h": 3, "l": 8, "dim": 64, "mp": 1})) == \
        "dim % h != 0"
    assert op.invalid_reason(op.resolve({"b": 1, "h": 4, "l": 8, "dim": 64, "mp": 8})) == \
        "h % mp != 0"
