"""A real profiler trace for the analyzer's tests: one small transformer block, forward and
backward, on the CPU under torch.profiler with record_shapes=True."""

from __future__ import annotations

from pathlib import Path

DIM, HEADS, SEQ, BATCH, FFN = 64, 4, 32, 2, 256


def transformer_trace(path: Path) -> Path:
    import torch
    from torch import nn
    from torch.nn import functional as F
    from torch.profiler import ProfilerActivity, profile

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
            self.up, self.down = nn.Linear(DIM, FFN), nn.Linear(FFN, DIM)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            q, k, v = (t.view(b, s, HEADS, DIM // HEADS).transpose(1, 2) for t in (q, k, v))
            scores = torch.softmax(q @ k.transpose(-2, -1) / (DIM // HEADS) ** 0.5, dim=-1)
            att = (scores @ v).transpose(1, 2).reshape(b, s, DIM)
            x = x + self.out(att)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + a.transpose(1, 2).reshape(b, s, DIM)
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    torch.manual_seed(0)
    model = Block()
    x = torch.randn(BATCH, SEQ, DIM, requires_grad=True)
    model(x).sum().backward()  # warm-up outside the trace
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        model(x).sum().backward()
    prof.export_chrome_trace(str(path))
    return path
