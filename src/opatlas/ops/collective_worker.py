"""One rank of a collective benchmark (run by torchrun; see ``opatlas.ops.collectives``)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from opatlas.ops.base import dtype_bytes
from opatlas.ops.torchutil import torch_dtype


def _setup(op: str, n: int, rank: int, world: int, dt: Any, device: str
           ) -> tuple[Callable[[], None], Callable[[], bool], Callable[[], None]]:
    """(run once, check the result, reset the inputs) for ``op`` with total size ``n``."""
    if op == "all_reduce":
        x = torch.empty(n, dtype=dt, device=device)

        def reset() -> None:
            x.fill_(rank + 1)
        return (lambda: dist.all_reduce(x)), (lambda: bool((x == world * (world + 1) // 2).all())), reset
    if op == "all_gather":
        x = torch.full((n // world,), rank, dtype=dt, device=device)
        y = torch.empty(n, dtype=dt, device=device)
        expect = torch.arange(world, device=device).repeat_interleave(n // world).to(dt)
        return (lambda: dist.all_gather_into_tensor(y, x)), (lambda: bool((y == expect).all())), \
            (lambda: None)
    if op == "reduce_scatter":
        x = torch.empty(n, dtype=dt, device=device)
        y = torch.empty(n // world, dtype=dt, device=device)

        def reset_rs() -> None:
            x.fill_(rank + 1)
        return (lambda: dist.reduce_scatter_tensor(y, x)), \
            (lambda: bool((y == world * (world + 1) // 2).all())), reset_rs
    if op == "all_to_all":
        x = torch.full((n,), rank, dtype=dt, device=device)
        y = torch.empty(n, dtype=dt, device=device)
        expect = torch.arange(world, device=device).repeat_interleave(n // world).to(dt)
        return (lambda: dist.all_to_all_single(y, x)), (lambda: bool((y == expect).all())), \
            (lambda: None)
    if op == "send_recv":
        x = torch.full((n,), 7, dtype=dt, device=device) if rank == 0 else torch.zeros(
            n, dtype=dt, device=device)

        def run() -> None:
            if rank == 0:
                dist.send(x, dst=world - 1)
            elif rank == world - 1:
                dist.recv(x, src=0)
        return run, (lambda: rank != world - 1 or bool((x == 7).all())), (lambda: None)
    raise ValueError(f"unknown collective {op!r}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    for flag in ("--op", "--sizes", "--backend", "--dtype", "--out"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = args.backend == "nccl"
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    dt = torch_dtype(args.dtype)
    lines = []
    for n in (int(s) for s in args.sizes.split(",")):
        run, check, reset = _setup(args.op, n, rank, world, dt, device)
        reset()
        run()
        correct = check()
        for _ in range(args.warmup):
            reset()
            run()
        local = []
        for _ in range(args.repeats):
            reset()
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter_ns()
            run()
            if cuda:
                torch.cuda.synchronize()
            local.append(time.perf_counter_ns() - t0)
        slowest = torch.tensor(local, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        ok = torch.tensor([1.0 if correct else 0.0], device=device)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        lines.append({"op": args.op, "elements": n, "bytes": n * dtype_bytes(args.dtype),
                      "world_size": world, "dtype": args.dtype, "backend": args.backend,
                      "samples_ns": [int(v) for v in slowest.tolist()], "correct": bool(ok.item()),
                      "message": "" if ok.item() else "wrong result on some rank"})
    if rank == 0:
        with open(args.out, "w") as fh:
            fh.writelines(json.dumps(line) + "\n" for line in lines)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
