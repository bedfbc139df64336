"""One rank of a collective benchmark (run by torchrun; see ``opatlas.ops.collectives``)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from opatlas.ops.base import dtype_bytes
from opatlas.ops.torchutil import torch_dtype

SAMPLES = "samples.jsonl"  # in --out: one JSON line per (op, size) measured, written as it ends
# collectives.COLLECTIVES, repeated so that a rank need not import pandas with that module
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


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


def _size_list(text: str) -> list[int]:
    """One ``--sizes``: comma-separated element counts, each > 0."""
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if any(n <= 0 for n in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: a size is a count of elements, > 0")
    return sizes


def _args(argv: list[str] | None) -> argparse.Namespace:
    """The options; ``plan`` pairs the i-th ``--op`` with the i-th ``--sizes``
    (``--op all_reduce --sizes 1024,4096 --op all_gather --sizes 1024``), measured in order."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", action="append", required=True, choices=OPS)
    ap.add_argument("--sizes", action="append", required=True, type=_size_list)
    for flag in ("--backend", "--dtype", "--out"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    if len(args.op) != len(args.sizes):
        ap.error(f"{len(args.op)} --op but {len(args.sizes)} --sizes: give one --sizes after "
                 f"each --op")
    args.plan = list(zip(args.op, args.sizes, strict=True))
    return args


def _measure(args: argparse.Namespace, op: str, n: int, rank: int, world: int, device: str
             ) -> dict:
    """One size of ``op``: checked once, warmed up, then timed ``repeats`` times on every
    rank."""
    cuda = device != "cpu"
    run, check, reset = _setup(op, n, rank, world, torch_dtype(args.dtype), device)
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
    return {"op": op, "elements": n, "bytes": n * dtype_bytes(args.dtype),
            "world_size": world, "dtype": args.dtype, "backend": args.backend,
            "samples_ns": [int(v) for v in slowest.tolist()], "correct": bool(ok.item()),
            "message": "" if ok.item() else "wrong result on some rank"}


def _say_failure(out: Path, rank: int, op: str | None, n: int | None, exc: BaseException
                 ) -> None:
    """The rank's own cause, for the driver to say instead of torchrun's ChildFailedError
    (which never names it); the time tells the first failure from its echoes on other ranks."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    message = f"{type(exc).__name__}: {lines[0] if lines else exc!r}"
    (out / f"rank{rank}.error").write_text(json.dumps(
        {"rank": rank, "op": op, "elements": n, "time_ns": time.time_ns(),
         "message": message[:500]}))


def main(argv: list[str] | None = None) -> None:
    """Measure every (op, size) of the plan in turn; rank 0 appends each one's line to
    ``<out>/samples.jsonl`` as soon as it is measured, so a later failure keeps the ones
    measured before it."""
    args = _args(argv)
    out, rank = Path(args.out), int(os.environ.get("RANK", 0))
    op: str | None = None
    n: int | None = None
    try:
        dist.init_process_group(args.backend)
        rank, world = dist.get_rank(), dist.get_world_size()
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if args.backend == "nccl" \
            else "cpu"
        if device != "cpu":
            torch.cuda.set_device(device)
        for op, sizes in args.plan:
            for n in sizes:
                line = _measure(args, op, n, rank, world, device)
                if rank == 0:
                    with open(out / SAMPLES, "a") as fh:
                        fh.write(json.dumps(line) + "\n")
        op = n = None  # a failure from here on is no (op, size)'s
        dist.destroy_process_group()
    except Exception as exc:
        _say_failure(out, rank, op, n, exc)
        raise


if __name__ == "__main__":
    main()
