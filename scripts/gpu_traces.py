"""Real GPU profiler traces for the analyzer (issue 18, step 2), run ON a GPU machine.

One training step (forward, loss, backward, AdamW step) of a small GPT block in bf16, profiled
with ``torch.profiler`` (CPU and CUDA activity, ``record_shapes=True``), at a few sequence
lengths, twice: attention written out (``matmul``, masked ``softmax``, ``matmul``, as stacks
before fused attention ran it) and through ``scaled_dot_product_attention``. Each trace is
written gzipped as ``gpt_block_{attention}_s{seq}.json.gz`` into the folder given.

    python3 scripts/gpu_traces.py OUTDIR [--seq 512 1024 2048]
"""

from __future__ import annotations

import argparse
import gzip
import math
import shutil
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

DIM, HEADS, FFN, BATCH, VOCAB = 1024, 16, 4096, 4, 8192


class Block(nn.Module):
    """A pre-norm GPT block: LayerNorm, causal self-attention, LayerNorm, GELU MLP."""

    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.sdpa = sdpa
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, FFN), nn.Linear(FFN, DIM)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = (t.reshape(b, s, HEADS, DIM // HEADS).transpose(1, 2)
                   for t in self.qkv(x).split(DIM, dim=-1))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(DIM // HEADS)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, s, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.block = Block(sdpa)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.emb(ids)))


def step(model: nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(ids)
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), ids.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def trace(outdir: Path, sdpa: bool, seq: int) -> Path:
    torch.manual_seed(0)
    model = TinyGPT(sdpa).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, VOCAB, (BATCH, seq), device="cuda")
    for _ in range(3):  # warm-up: cuBLAS handles, autotuning, the optimizer's state
        step(model, opt, ids)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        step(model, opt, ids)
        torch.cuda.synchronize()
    name = f"gpt_block_{'sdpa' if sdpa else 'unfused'}_s{seq}.json"
    raw = outdir / name
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(outdir / f"{name}.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return outdir / f"{name}.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--seq", type=int, nargs="+", default=[512, 1024, 2048])
    args = ap.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    for sdpa in (False, True):
        for seq in args.seq:
            path = trace(args.outdir, sdpa, seq)
            print(f"{path.name}: {path.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
