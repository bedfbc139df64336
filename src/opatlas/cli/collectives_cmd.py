"""``opatlas collectives``: measure a collective on this node with torchrun."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from opatlas.errors import OpatlasError

if TYPE_CHECKING:
    from opatlas.store import Store

BACKENDS = ("gloo", "nccl")


def _check_launch(backend: str, dtype: str, nproc: int) -> None:
    """Refuse what every torchrun worker would die on, before launching them: a worker's
    failure reaches us only as torchrun's ChildFailedError, without its cause."""
    if backend not in BACKENDS:
        raise OpatlasError(f"--backend {backend!r}: expected gloo (CPU) or nccl (CUDA GPUs)")
    from opatlas.ops.torchutil import torch_dtype

    try:
        torch_dtype(dtype)
    except ValueError as exc:
        raise OpatlasError(f"--dtype: {exc}") from None
    if backend != "nccl":
        return
    import torch

    if not torch.cuda.is_available():
        raise OpatlasError("--backend nccl needs CUDA GPUs and none is available here; use "
                           "--backend gloo to measure on CPUs")
    if (gpus := torch.cuda.device_count()) < nproc:
        raise OpatlasError(f"--backend nccl needs one GPU per rank: --nproc {nproc}, but "
                           f"{gpus} GPU(s) are visible")


def _sizes(sizes: str) -> list[int]:
    """``--sizes``: at least one integer, comma-separated."""
    try:
        size_list = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise OpatlasError(f"--sizes {sizes!r}: expected comma-separated integers") from None
    if not size_list:
        raise OpatlasError(f"--sizes {sizes!r}: no size given; expected comma-separated "
                           f"integers (total elements), e.g. --sizes 1024,1048576")
    return size_list


def _store(path: Path | None) -> AbstractContextManager[Store | None]:
    """The ``--store`` to record into, opened (and checked) as ``opatlas run`` opens its
    store; nothing without one."""
    if path is None:
        return nullcontext()
    from opatlas.store.writing import store_for_writing

    return store_for_writing(path)


def collectives(
    op: str = typer.Argument(..., help="all_reduce | all_gather | reduce_scatter | all_to_all | "
                                       "send_recv"),
    nproc: int = typer.Option(2, "--nproc", min=2, help="Ranks (processes) on this node."),
    sizes: str = typer.Option("1048576", "--sizes", help="Total elements, comma-separated."),
    backend: str = typer.Option("gloo", "--backend", help="gloo (CPU) or nccl (GPUs)."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32, fp64, fp16 or bf16."),
    repeats: int = typer.Option(10, "--repeats", min=1,
                               help="Timed runs per size, after a warm-up."),
    link_peak_gbps: float | None = typer.Option(None, "--link-peak-gbps", min=0.001,
                                                help="Flag bus bandwidths above this (GB/s, "
                                                     "the link's peak) as invalid."),
    store: Path | None = typer.Option(None, "--store", help="Also record the results here."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Time a collective on every rank; record the slowest rank; report algbw and busbw.

    Examples:

        opatlas collectives all_reduce --nproc 4 --sizes 1024,1048576

        opatlas collectives all_gather --nproc 8 --backend nccl --dtype bf16 --link-peak-gbps 450
    """
    size_list = _sizes(sizes)
    _check_launch(backend, dtype, nproc)
    from opatlas.ops.collectives import record, run_collective

    with _store(store) as st:  # a bad store fails here, before anything is measured
        df = run_collective(op, size_list, nproc, backend=backend, dtype=dtype,
                            repeats=repeats, link_peak_gbps=link_peak_gbps)
        if st is not None:
            from opatlas.backends.cpu import cpu_model_name

            record(st, df, cpu_model_name() if backend == "gloo" else backend)
    if as_json:
        typer.echo(json.dumps(df.drop(columns=["samples_ns"]).to_dict("records")))
        return
    for r in df.to_dict("records"):
        typer.echo(f"{r['op']:<15} {r['elements']:>12} el  {r['world_size']} ranks  "
                   f"{r['median_ns'] / 1e3:>10.1f} µs  algbw {r['algbw_GBps']:.3f} GB/s  "
                   f"busbw {r['busbw_GBps']:.3f} GB/s  {r['status']} {r['message']}")
