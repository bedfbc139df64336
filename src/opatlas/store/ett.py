"""estimate-train-time compatibility: read its sampling CSVs into the store, write them back.

Operator files are ``{GPU}_{op}_{precision}.csv`` with shape columns then ``F_dur(us)`` and
``B_dur(us)`` (or one ``dur(us)``); NCCL files are ``{GPU}_{collective}_{precision}[_{nodes}_{gpn}]
.csv`` with ``shape,nodes,GPUsPerNode,dur(us)``. Each imported value becomes one ``ok`` result
row (mean = median = the upstream value, repeats 10: upstream's trimmed mean of 10 runs); a
shape sampled more than once in a file is one row over its values (:func:`merge_repeats`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from opatlas.errors import StoreError
from opatlas.samples import bundled_dataset, filed_device_name, parse_sample_name
from opatlas.store.db import ResultRow, Store
from opatlas.sweep import params_json, vector_id

PRECISIONS = ("fp16", "bf16", "fp32")
PASS_COLUMNS = {"F_dur(us)": "fwd", "B_dur(us)": "bwd", "dur(us)": "step", "dur": "step"}
IMPORT_BACKEND = "ett-import"
__all__ = ["bundled_dataset", "export_ett", "filed_device_name", "import_ett_samples",
           "merge_repeats", "parse_sample_name", "read_sample_file"]


def _counts(op: str, params: dict) -> tuple[dict, dict]:
    from opatlas.ops.registry import resolved_params

    try:
        o, full = resolved_params(op, params)
        if o.invalid_reason(full) is None:
            return o.flops(full), o.min_bytes(full)
    except Exception:  # ops opatlas does not model yet import without counts
        pass
    return {}, {}


def read_sample_file(path: Path, counts: bool = True) -> list[ResultRow]:
    """Result rows of one sampling CSV; ``counts`` adds the catalog's FLOPs and bytes (the
    store wants them; model fitting derives its own features and skips the cost)."""
    meta = parse_sample_name(path)
    if meta is None:
        return []
    df = pd.read_csv(path)
    pass_cols = [c for c in df.columns if c in PASS_COLUMNS]
    if not pass_cols:
        return []
    shape_cols = [c for c in df.columns if c not in pass_cols]
    kind = "nccl" if {"shape", "nodes", "GPUsPerNode"} <= set(df.columns) else "op"
    op = f"nccl.{meta['op']}" if kind == "nccl" else meta["op"]
    rows = []
    for rec in df.to_dict("records"):
        params = {c: _num(rec[c]) for c in shape_cols}
        params["dtype"] = meta["prec"]
        vid = vector_id(op, params)
        flops, nbytes = _counts(op, params) if counts and kind == "op" else ({}, {})
        for col in pass_cols:
            us = rec[col]
            if pd.isna(us):
                continue
            ns = float(us) * 1000.0
            pass_ = PASS_COLUMNS[col]
            rows.append(ResultRow(
                vector_id=vid, op=op, params_json=params_json(params), pass_=pass_,
                backend=IMPORT_BACKEND, device=meta["gpu"], dtype=meta["prec"], status="ok",
                repeats=10, mean_ns=ns, median_ns=ns, min_ns=ns, max_ns=ns, std_ns=None,
                flops=flops.get(pass_), min_bytes=nbytes.get(pass_),
                message=f"imported from {path.name} (upstream trimmed mean of 10)"))
    return rows


def merge_repeats(rows: list[ResultRow]) -> tuple[list[ResultRow], int]:
    """One row per (vector, pass): a shape sampled more than once (upstream's flash_atten file
    has 85 such) becomes one row over all its values: median, mean, min and max of them,
    ``repeats`` 10 per value. Returns the rows and how many shapes had repeats."""
    groups: dict[tuple[str, str], list[ResultRow]] = {}
    for row in rows:
        groups.setdefault((row.vector_id, row.pass_), []).append(row)
    merged, repeated = [], set()
    for (vid, _), same in groups.items():
        if len(same) > 1:
            repeated.add(vid)
            same[0] = _merged(same)
        merged.append(same[0])
    return merged, len(repeated)


def _merged(rows: list[ResultRow]) -> ResultRow:
    values = np.array([r.median_ns for r in rows], dtype=float)
    first = rows[0]
    return dataclasses.replace(
        first, repeats=sum(r.repeats for r in rows), median_ns=float(np.median(values)),
        mean_ns=float(values.mean()), min_ns=float(values.min()), max_ns=float(values.max()),
        message=f"{first.message}; this shape sampled {len(rows)} times: median, mean, min "
                f"and max over them")


def import_ett_samples(store: Store, directory: str | Path) -> dict[str, int]:
    """Import every sampling CSV under ``directory`` (recursively); returns rows per file.
    A shape a file holds more than once is stored once, over all its values
    (:func:`merge_repeats`), and said on stderr."""
    directory = Path(directory)
    if not directory.is_dir():
        raise StoreError(f"{directory} is not a directory of estimate-train-time CSVs")
    added: dict[str, int] = {}
    for path in sorted(directory.rglob("*.csv")):
        rows, repeated = merge_repeats(read_sample_file(path))
        if repeated:
            print(f"opatlas: note: {rows[0].op} ({path.name}): {repeated} shape(s) appear "
                  f"more than once; each is stored once, with the median (and mean, min, "
                  f"max) of its values", file=sys.stderr)
        if rows:
            added[str(path.relative_to(directory))] = store.add_results(rows)
    if not added:
        raise StoreError(f"no estimate-train-time sample files found under {directory}")
    return added


def export_ett(store: Store, outdir: str | Path) -> list[Path]:
    """Write results back in upstream's layout: one CSV per (device, op, dtype), shape columns
    then ``F_dur(us)``/``B_dur(us)`` (or ``dur(us)``) from the median."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    df = store.results(expand_params=False)
    df = df[df["status"] == "ok"]
    written = []
    for (device, op, dtype), g in df.groupby(["device", "op", "dtype"]):
        params = pd.DataFrame([json.loads(s) for s in g["params_json"]], index=g.index)
        shape_cols = [c for c in params.columns if c != "dtype"]
        wide = pd.concat([params[shape_cols], g[["pass"]], g["median_ns"] / 1000.0], axis=1)
        wide = wide.pivot_table(index=shape_cols, columns="pass", values="median_ns",
                                aggfunc="first").reset_index()
        names = {"fwd": "F_dur(us)", "bwd": "B_dur(us)", "step": "dur(us)"}
        wide = wide.rename(columns=names)
        cols = shape_cols + [names[p] for p in ("fwd", "bwd", "step") if names[p] in wide]
        name = op.removeprefix("nccl.")
        path = outdir / f"{str(device).replace(' ', '')}_{name}_{dtype}.csv"
        wide[cols].to_csv(path, index=False)
        written.append(path)
    return written


def _num(v: object) -> object:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v
