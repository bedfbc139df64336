"""The transformer catalog: FLOPs/bytes by hand, forward against float64, backward, features."""

from __future__ import annotations

import math

import pytest
import torch

from opatlas.ops import get_op, list_ops
from opatlas.ops.registry import resolved_params
from opatlas.run.stats import summarize


def _p(name, **kw):
    return resolved_params(name, kw)


def test_counts_by_hand():
    op, p = _p("embedding", mp=2, b=2, l=8, dim=16, vocab=1000, dtype="fp16")
    rows = math.ceil(1000 / 256) * 256 // 2  # padded to 128*mp = 256 -> 1024, shard 512
    assert rows == 512 and op.features(p)["vocab_rows"] == 512
    assert op.min_bytes(p) == {"fwd": 2 * 2 * 16 * 16 + 8 * 16, "bwd": 2 * (16 * 16 + 512 * 16) + 8 * 16}
    op, p = _p("rmsnorm", b=2, l=4, dim=8)
    assert op.flops(p) == {"fwd": 4 * 64, "bwd": 8 * 64}
    op, p = _p("swiglu", b=1, l=4, dim=8, ffn=24, mp=2)  # out (4, 12), in (4, 24)
    assert op.flops(p)["fwd"] == 6 * 48 and op.min_bytes(p)["fwd"] == 4 * 3 * 48
    op, p = _p("rope", b=2, h=4, l=8, dim=32, mp=2)  # (8, 2, 2, 8)
    assert op.flops(p)["fwd"] == 3 * 256 and op.min_bytes(p)["fwd"] == 4 * (2 * 256 + 2 * 8 * 8)
    op, p = _p("baddbmm", b=1, h=2, l=4, dim=8)  # batch 2, (4x4)·(4x4)
    assert op.flops(p)["fwd"] == 2 * 2 * 4 * 4 * 4 + 2 * 4 * 4
    op, p = _p("cross_entropy", b=1, l=4, mp=1, vocab=200)  # padded 256
    assert op.flops(p) == {"fwd": 5 * 4 * 256, "bwd": 3 * 4 * 256}
    op, p = _p("adam_step", n_params=1000)
    assert op.flops(p) == {"step": 12000} and op.min_bytes(p) == {"step": 28000}
    # 16-bit gradient into an fp32 buffer: read 2, read and write 4 + 4 bytes a parameter
    op, p = _p("grad_accumulate", n_params=1000, dtype="bf16")
    assert op.flops(p) == {"step": 1000} and op.min_bytes(p) == {"step": 10000}
    op, p = _p("grad_accumulate", n_params=1000, dtype="fp16", buffer_bytes=2)
    assert op.min_bytes(p) == {"step": 6000}
    assert op.invalid_reason({**p, "buffer_bytes": 8}) == "buffer_bytes must be 2 or 4"
    # upstream's stage simulator: QKV with bias, out/up/down without, two norms (w + b)
    layer = (3 * 64 * 64 + 3 * 64 + 64 * 64 + 2 * 64 * 256) // 2 + 4 * 64
    op, p = _p("firstStage_optimizer", mp=2, dim=64, encoders=2, vocab=1000)
    assert op.features(p)["params"] == 2 * layer + 512 * 64  # vocab padded to 1024, /mp
    assert op.features(p)["tensors"] == 2 * 9 + 1
    op, p = _p("lastStage_optimizer", mp=2, dim=64, encoders=2, vocab=1000)
    assert op.features(p)["params"] == 2 * layer + 256 * 64 + 2 * 64  # head shard /mp twice
    assert op.features(p)["tensors"] == 2 * 9 + 3
    op, p = _p("adam_step", mp=2, dim=64, encoders=2, vocab=1000, stage="last")  # ours: flat
    ours = (4 * 64 * 64 + 4 * 64 + 2 * 64 * 256 + 256 + 64) // 2 + 4 * 64
    assert op.features(p)["params"] == 2 * ours + 512 * 64 + 2 * 64
    assert op.features(p)["tensors"] == 1
    op, p = _p("moe", b=1, l=8, dim=16, experts=4, top_k=2, ffn=32, mp=1)
    assert op.flops(p)["fwd"] == 2 * 8 * 16 * 4 + 2 * 2 * 8 * 2 * 16 * 32
    op, p = _p("flash_attention", b=1, h=8, kv_heads=2, l=16, dim=64, dtype="bf16")
    assert op.min_bytes(p)["fwd"] == 2 * (2 * 8 * 16 * 8 + 2 * 2 * 16 * 8)
    op, p = _p("fillmask", b=1, h=2, l=4)
    assert op.flops(p)["fwd"] == 0 and op.min_bytes(p)["fwd"] == 4 * 2 * 32 + 16


def _ref_rope(s):
    x, cos, sin = (t.double() for t in s)
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def _ref_attention(s):
    q, k, v, causal, _ = s
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(scores, -1) @ v


def _ref_moe(s):
    x, router, up, down, k = s
    x, router, up, down = x.double(), router.double(), up.double(), down.double()
    gates = torch.softmax(x @ router, -1)
    w, idx = gates.topk(k, -1)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(k):
            e = idx[t, j]
            out[t] += w[t, j] * (torch.nn.functional.gelu(x[t] @ up[e]) @ down[e])
    return out


def test_causal_softmax_reads_only_its_triangle_and_writes_whole():
    """b=1, h=2, l=4 fp16: 8 rows of 4; the causal triangle holds 8·5/2 = 20 elements of 32.
    fwd reads x there and writes y whole; bwd reads dy and y there and writes dx whole."""
    op, p = _p("masked_softmax", b=1, h=2, l=4, dtype="fp16")
    assert op.min_bytes(p) == {"fwd": 2 * (20 + 32), "bwd": 2 * (2 * 20 + 32)}


REFERENCES = {
    "embedding": ({"b": 2, "l": 4, "dim": 8, "vocab": 300, "mp": 2},
                  lambda s: s[1].double()[s[0]]),
    "rmsnorm": ({"b": 2, "l": 4, "dim": 16},
                lambda s: s[0].double() / (s[0].double().pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
                * s[1].double()),
    "swiglu": ({"b": 2, "l": 4, "dim": 8},
               lambda s: (lambda a, b: a * torch.sigmoid(a) * b)(*s.double().chunk(2, -1))),
    "rope": ({"b": 2, "h": 4, "l": 8, "dim": 32}, _ref_rope),
    "masked_softmax": ({"b": 1, "h": 2, "l": 8},
                       lambda s: torch.softmax((s[0].double() * 0.125).masked_fill(s[1], -math.inf), -1)),
    "fillmask": ({"b": 1, "h": 2, "l": 8}, lambda s: s[0].double().masked_fill(s[1], -10000.0)),
    "baddbmm": ({"b": 1, "h": 2, "l": 8, "dim": 16},
                lambda s: s[3] * (s[1].double() @ s[2].double())),
    "residual_add": ({"b": 2, "l": 4, "dim": 8}, lambda s: s[0].double() + s[1].double()),
    "cross_entropy": ({"b": 2, "l": 4, "vocab": 100},
                      lambda s: -torch.log_softmax(s[0].double(), -1)[torch.arange(8), s[1]].mean()),
    "moe": ({"b": 1, "l": 6, "dim": 8, "experts": 4, "top_k": 2, "ffn": 16}, _ref_moe),
    "flash_attention": ({"b": 1, "h": 8, "kv_heads": 2, "l": 16, "dim": 128}, _ref_attention),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_forward_matches_float64_and_backward_runs(name):
    torch.manual_seed(1)
    shape, ref = REFERENCES[name]
    op, p = _p(name, **shape, dtype="fp32")
    state = op.build(p, "cpu")
    torch.testing.assert_close(op.forward(state).double(), ref(state), rtol=1e-4, atol=1e-5)
    op.execute(state, "bwd", op.prepare(state, "bwd"))
    leaves = state if isinstance(state, tuple) else (state,)
    grads = [t.grad for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize(("buffer_bytes", "dtype"), [(4, torch.float32), (2, torch.float16)])
def test_grad_accumulate_adds_the_gradient_into_the_buffer(buffer_bytes, dtype):
    op, p = _p("grad_accumulate", n_params=512, dtype="fp16", buffer_bytes=buffer_bytes)
    buffer, grad = op.build(p, "cpu")
    assert buffer.dtype == dtype and grad.dtype == torch.float16
    for _ in range(2):  # two micro-batches
        op.execute((buffer, grad), "step", op.prepare((buffer, grad), "step"))
    assert torch.allclose(buffer.float(), 2 * grad.float(), atol=1e-3)


def test_adam_step_runs_and_moves_the_parameters():
    op, p = _p("adam_step", n_params=4096)
    opt = op.build(p, "cpu")
    w = opt.param_groups[0]["params"][0]
    op.execute(opt, "step", op.prepare(opt, "step"))
    assert torch.count_nonzero(w).item() > 4000


def test_every_catalog_op_has_counts_features_and_runs_on_the_cpu_backend():
    from opatlas.backends.cpu import CpuBackend

    small = {"b": 1, "l": 8, "dim": 16, "h": 2, "experts": 2, "top_k": 1, "n_params": 64,
             "vocab": 64}
    backend = CpuBackend()
    for name in list_ops():
        op, _ = get_op(name)
        if not set(op.params) <= set(small):
            continue  # not a transformer op (e.g. reshard: Tenstorrent only)
        p = op.resolve({k: v for k, v in small.items() if k in op.params or k in op.defaults})
        assert op.invalid_reason(p) is None, name
        assert set(op.flops(p)) == set(op.passes) == set(op.min_bytes(p))
        assert all(isinstance(v, float) for v in op.features(p).values()) or op.features(p)
        timings = backend.measure(op, p, op.passes, repeats=2, warmup=1)
        for samples in timings.values():
            assert len(samples) == 2 and summarize(samples)["min_ns"] >= 0


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_low_precision_dtypes_run(dtype):
    op, p = _p("linear", b=1, l=8, dim=16, dtype=dtype)
    assert op.forward(op.build(p, "cpu")).dtype == getattr(torch, {"fp16": "float16",
                                                                  "bf16": "bfloat16"}[dtype])


def test_batch_evaluation_equals_per_row_evaluation_for_every_op():
    import numpy as np
    import pandas as pd

    from opatlas.ops import list_ops
    from opatlas.ops.batch import batch_counts

    rng = np.random.default_rng(0)
    for name in list_ops(include_aliases=True):
        op, fixed = get_op(name)
        if name in ("noop", "fault") or not set(op.params) <= {"b", "l", "dim", "h", "experts",
                                                                 "top_k"}:
            continue
        rows = []
        while len(rows) < 40:
            cand = {"b": int(rng.choice([1, 2, 4])), "l": int(rng.choice([128, 512, 1000])),
                    "dim": int(rng.choice([256, 1024, 4096])), "h": int(rng.choice([4, 8, 16])),
                    "mp": int(rng.choice([1, 2, 4])), "experts": 8, "top_k": 2,
                    "encoders": int(rng.choice([1, 4])), "kv_heads": int(rng.choice([0, 4])),
                    "ffn": int(rng.choice([0, 2048])), "causal": int(rng.choice([0, 1])),
                    "n_params": int(rng.choice([0, 1000]))}
            cand = {k: v for k, v in cand.items() if k in op.params or k in op.defaults}
            full = op.resolve({**fixed, **cand})
            if op.invalid_reason(full) is None:
                rows.append(cand)
        df = pd.DataFrame(rows)
        batch = batch_counts(name, df)
        for i, row in enumerate(rows):
            full = op.resolve({**fixed, **row})
            for pass_, v in op.flops(full).items():
                assert batch[f"flops_{pass_}"].iloc[i] == pytest.approx(float(v)), (name, row)
            for pass_, v in op.min_bytes(full).items():
                assert batch[f"bytes_{pass_}"].iloc[i] == pytest.approx(float(v)), (name, row)
            for feat, v in op.features(full).items():
                assert batch[feat].iloc[i] == pytest.approx(float(v)), (name, feat)


def test_attention_dropout_keeps_or_scales_and_counts_five_bytes_per_fp16_probability():
    op, p = _p("attention_dropout", b=2, h=4, l=64, mp=2, dtype="fp32")
    x, prob = op.build(p, "cpu")
    assert tuple(x.shape) == (2, 2, 64, 64) and prob == 0.1
    y = op.forward((x, prob)).detach()
    kept = y != 0
    torch.testing.assert_close(y[kept], x.detach()[kept] / 0.9)
    assert 0.05 < 1 - kept.double().mean().item() < 0.15  # about p of 16,384 dropped
    op, p = _p("attention_dropout", b=1, h=8, l=16, mp=2, dtype="fp16")
    elems = 1 * 4 * 16 * 16
    assert op.min_bytes(p) == {"fwd": 5 * elems, "bwd": 5 * elems}
    assert op.flops(p) == {"fwd": 2 * elems, "bwd": 2 * elems}
    assert op.invalid_reason({**p, "p": 1.0}) == "p must be in [0, 1)"
    assert op.invalid_reason({**p, "h": 7}) == "h % mp != 0"


def test_bias_dropout_add_is_the_residual_add_plus_mask_dropout_gradient_and_bias_gradient():
    op, p = _p("bias_dropout_add", b=2, l=8, dim=16, dtype="fp16")  # p 0.1, bias by default
    n, w = 2 * 8 * 16, 16
    # fwd: x, residual in, sum out (2 bytes each) + a 1-byte mask, + the bias read
    # bwd: the accumulation add (3·2) + dropout's gradient (2 + 1 + 2) + the bias sum (2)
    assert op.min_bytes(p) == {"fwd": 7 * n + 2 * w, "bwd": 13 * n + 2 * w}
    assert op.flops(p) == {"fwd": 4 * n, "bwd": 4 * n}
    res = _p("residual_add", b=2, l=8, dim=16, dtype="fp16")
    _, plain = _p("bias_dropout_add", b=2, l=8, dim=16, dtype="fp16", p=0.0, bias=0)
    assert op.min_bytes(plain) == res[0].min_bytes(res[1])  # p = 0, no bias: the residual add
    assert op.flops(plain) == res[0].flops(res[1])
    _, fp32 = _p("bias_dropout_add", b=2, l=64, dim=32, dtype="fp32", p=0.25)
    x, residual, bias, prob = state = op.build(fp32, "cpu")
    assert prob == 0.25 and tuple(x.shape) == (128, 32) and tuple(bias.shape) == (32,)
    y = op.forward(state).detach()
    kept = (y - residual) != 0
    torch.testing.assert_close((y - residual)[kept], (x + bias).detach()[kept] / 0.75)
    assert 0.18 < 1 - kept.double().mean().item() < 0.32  # about p of 4,096 dropped
    op.execute(state, "bwd", op.prepare(state, "bwd"))  # x's and the bias's gradients
    assert op.invalid_reason({**fp32, "p": 1.0}) == "p must be in [0, 1)"
    assert op.invalid_reason({**fp32, "bias": 2}) == "bias must be 0 or 1"
