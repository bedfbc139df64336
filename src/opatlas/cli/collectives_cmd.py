"""``opatlas collectives``: measure collectives on this node, in one torchrun launch."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from opatlas.errors import OpatlasError

if TYPE_CHECKING:
    import pandas as pd

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


def _items(text: str, what: str) -> list[str]:
    """The comma-separated items of ``text`` (``what``: the argument, for errors); an empty
    item (``1,,2``, a trailing comma) is refused rather than guessed at. Blank: []."""
    items = [s.strip() for s in text.split(",")]
    if not any(items):
        return []
    if "" in items:
        raise OpatlasError(f"{what} {text!r}: an empty item between commas; expected "
                           f"comma-separated values without gaps")
    return items


def _sizes(sizes: str) -> list[int]:
    """``--sizes``: at least one integer, comma-separated."""
    try:
        size_list = [int(s) for s in _items(sizes, "--sizes")]
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


def _held(st: Store, op: str, backend: str, device: str) -> dict[tuple[int, int, str], dict]:
    """The ``ok`` rows the store holds for ``op`` on (backend, device), by (elements, ranks,
    dtype): a new measurement of such a size is not stored (a store keeps a key's first
    answer, as ``opatlas run`` does). A failure or an ``invalid`` row (a bus bandwidth above
    a mistaken --link-peak-gbps) is replaced (:func:`opatlas.ops.collectives.record`)."""
    df = st.results(op=f"collective.{op}")
    if df.empty:
        return {}
    df = df[(df["backend"] == backend) & (df["device"] == device) & (df["status"] == "ok")]
    return {(int(r["elements"]), int(r["world_size"]), str(r["dtype"])): r
            for r in df.to_dict("records")}


def _not_stored(df: pd.DataFrame, held: Mapping[str, dict[tuple[int, int, str], dict]],
                path: Path) -> list[str]:
    """One line per (op, size) measured now that the store kept its earlier answer for;
    ``held``: :func:`_held` by op."""
    lines = []
    for r in df.to_dict("records"):
        old = held.get(r["op"], {}).get((int(r["elements"]), int(r["world_size"]),
                                         str(r["dtype"])))
        if old is None:
            continue
        was = old["status"] + (f", {old['median_ns'] / 1e3:.1f} µs"
                               if old["status"] == "ok" else "")
        now = r["status"] + (f", {r['median_ns'] / 1e3:.1f} µs" if r["status"] == "ok" else "")
        lines.append(f"{path} already holds {r['op']} at {r['elements']} elements on "
                     f"{r['world_size']} ranks ({r['dtype']}, {r['backend']}): {was}, recorded "
                     f"{old['created_at']:%Y-%m-%d %H:%M}; it keeps that first answer, and this "
                     f"run's ({now}) was not stored (use another --store to keep it)")
    return lines


def _device(backend: str) -> str:
    """The name results are filed under: the CPU's model for gloo, the GPU's as ``opatlas
    run`` files its CUDA measurements (rank 0's GPU, ``cuda:0``)."""
    if backend == "gloo":
        from opatlas.backends.cpu import cpu_model_name

        return cpu_model_name()
    from opatlas.backends.cuda import CudaBackend

    return CudaBackend(device=0).device_name()


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _ops(text: str) -> list[str]:
    """The OP argument: comma-separated collectives, ``all`` for every one; a repeated one
    is measured once (said)."""
    from opatlas.ops.collectives import COLLECTIVES

    names = _items(text, "OP")
    expanded = [op for n in names for op in (COLLECTIVES if n == "all" else (n,))]
    valid = f"expected comma-separated names out of {', '.join(COLLECTIVES)}, or all"
    if not expanded:
        raise OpatlasError(f"OP {text!r}: no collective given; {valid}")
    if unknown := [n for n in dict.fromkeys(expanded) if n not in COLLECTIVES]:
        raise OpatlasError(f"unknown collective{'s' * (len(unknown) > 1)} "
                           f"{', '.join(map(repr, unknown))}; {valid}")
    ops = list(dict.fromkeys(expanded))
    for op in ops:
        if expanded.count(op) > 1:
            typer.echo(f"opatlas: {op} is on the list already; measured once", err=True)
    return ops


def _planned(ops: str, sizes: str, nproc: int, backend: str, dtype: str) -> dict[str, list[int]]:
    """The sizes to measure for each op (said where they differ from ``--sizes``), each
    checked against memory before any rank is launched."""
    from opatlas.ops.collectives import check_memory, plan_sizes

    op_list, size_list = _ops(ops), _sizes(sizes)
    plan: dict[str, list[int]] = {}
    notes: dict[str, list[str]] = {}  # a note -> the ops it is about
    for op in op_list:
        takes = _sizes_taken(op, size_list, nproc, notes) if len(op_list) > 1 else size_list
        plan[op], op_notes = plan_sizes(op, takes, nproc)
        for note in op_notes:
            notes.setdefault(note, [])
            notes[note] += [op] if op not in notes[note] else []
    if not (plan := {op: planned for op, planned in plan.items() if planned}):
        raise OpatlasError(f"--sizes {sizes}: no size that any of {', '.join(op_list)} can "
                           f"take on {nproc} ranks")
    for note, about in notes.items():  # a repeated size's note is the same for several ops
        named = len(op_list) > 1 and not any(op in note for op in about)
        typer.echo(f"opatlas: {note}" + (f" ({', '.join(about)})" if named else ""), err=True)
    for op, planned in plan.items():
        check_memory(op, planned, nproc, dtype, backend)
    if backend == "gloo" and nproc > (cores := _usable_cores()):
        typer.echo(f"opatlas: warning: --nproc {nproc} gloo ranks on {cores} CPU cores: ranks "
                   f"share cores, so the times measure the oversubscription, not the "
                   f"collective", err=True)
    return plan


def _sizes_taken(op: str, sizes: list[int], nproc: int, notes: dict[str, list[str]]
                 ) -> list[int]:
    """The sizes ``op`` can take among several ops' (``all``): one it cannot (fewer elements
    than ranks, for the ops that split the buffer) is left out for it alone, said in
    ``notes``, instead of refusing every op's run."""
    from opatlas.ops.collectives import plan_sizes

    taken = []
    for n in sizes:
        try:
            plan_sizes(op, [n], nproc)
        except OpatlasError as exc:
            notes.setdefault(f"{exc}: left out for {op}, measured for the others", []).append(op)
            continue
        taken.append(n)
    return taken


def _run(plan: Mapping[str, Sequence[int]], nproc: int, **options: Any) -> pd.DataFrame:
    """Every op of ``plan`` in one torchrun launch: ``run_collective`` for one op (the entry
    point since before ops shared a launch), else ``run_collectives``."""
    from opatlas.ops import collectives

    if len(plan) == 1:
        ((op, sizes),) = plan.items()
        return collectives.run_collective(op, sizes, nproc, **options)
    return collectives.run_collectives(plan, nproc, **options)


def _report(df: pd.DataFrame, st: Store | None, device: str, as_json: bool) -> None:
    """Record (said where the store keeps an earlier answer) and print ``df``."""
    if st is not None and not df.empty:
        from opatlas.ops.collectives import record

        backend = str(df.iloc[0]["backend"])
        held = {op: _held(st, op, backend, device) for op in df["op"].unique()}
        record(st, df, device)
        for line in _not_stored(df, held, st.path):
            typer.echo(f"opatlas: {line}", err=True)
    if as_json:
        typer.echo(json.dumps(df.drop(columns=["samples_ns"]).to_dict("records")
                              if not df.empty else []))
        return
    for r in df.to_dict("records"):
        typer.echo(f"{r['op']:<15} {r['elements']:>12} el  {r['world_size']} ranks  "
                   f"{r['median_ns'] / 1e3:>10.1f} µs  algbw {r['algbw_GBps']:.3g} GB/s  "
                   f"busbw {r['busbw_GBps']:.3g} GB/s  {r['status']} {r['message']}")


def collectives(
    op: str = typer.Argument(...,
                             help="Comma-separated collectives out of all_reduce, all_gather, "
                                  "reduce_scatter, all_to_all, send_recv; or all (every one, "
                                  "in that order). They are measured in ONE torchrun launch."),
    nproc: int = typer.Option(2, "--nproc", min=2, help="Ranks (processes) on this node."),
    sizes: str = typer.Option("1048576", "--sizes",
                              help="Total elements, comma-separated, for every OP. "
                                   "all_gather, reduce_scatter and all_to_all round each down "
                                   "to a multiple of --nproc (said on stderr)."),
    backend: str = typer.Option("gloo", "--backend", help="gloo (CPU) or nccl (GPUs)."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32, fp64, fp16 or bf16."),
    repeats: int = typer.Option(10, "--repeats", min=1,
                               help="Timed runs per size, after a warm-up."),
    link_peak_gbps: float | None = typer.Option(None, "--link-peak-gbps", min=0.001,
                                                help="Flag bus bandwidths above this (GB/s, "
                                                     "the link's peak) as invalid."),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, metavar="SECONDS",
                                  help="Stop every rank after this long (every OP and size "
                                       "together); the sizes measured by then are kept."),
    store: Path | None = typer.Option(
        None, "--store", help="Also record the results here. A size it holds already keeps "
                              "its first answer (said on stderr); a failed or invalid one "
                              "is replaced."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Time collectives on every rank; record the slowest rank; report algbw and busbw.

    Several OPs (a comma list, or all) are measured in one torchrun launch.

    A failing size stops the run: what was measured before it is printed and stored.

    Examples:

        opatlas collectives all_reduce --nproc 4 --sizes 1024,1048576

        opatlas collectives all_reduce,all_gather --nproc 4 --sizes 1024,1048576

        opatlas collectives all --nproc 4

        opatlas collectives all_gather --nproc 8 --backend nccl --dtype bf16 --link-peak-gbps 450
    """
    _check_launch(backend, dtype, nproc)
    plan = _planned(op, sizes, nproc, backend, dtype)
    from opatlas.ops.collectives import CollectiveFailed, CollectiveInterrupted, measured_sizes

    with _store(store) as st:  # a bad store fails here, before anything is measured
        device = _device(backend) if st is not None else backend
        try:
            df = _run(plan, nproc, backend=backend, dtype=dtype, repeats=repeats,
                      link_peak_gbps=link_peak_gbps, timeout_s=timeout)
        except CollectiveFailed as exc:
            _report(exc.partial, st, device, as_json)
            raise
        except CollectiveInterrupted as exc:  # typer turns a KeyboardInterrupt into a silent 130
            _report(exc.partial, st, device, as_json)
            kept = (f"; the sizes measured before ({measured_sizes(exc.partial, len(plan) > 1)})"
                    f" are kept" if not exc.partial.empty else "")
            typer.echo(f"opatlas: interrupted; every rank was stopped{kept}", err=True)
            raise typer.Exit(130) from None
        _report(df, st, device, as_json)
