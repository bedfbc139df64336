"""tt-metal sweep-framework files: the seed's vector export layout, and its result JSON.

Export: ``vectors_export/<in_grid>/reshard-<in_grid>-<out_grid>.json`` holding
``{suite_name: {input_hash: vector}}``; every parameter serialised as the framework does
(``str(obj)``: ``"ShardStrategy.BLOCK"``, ``"[1, 1, 64, 96]"``, ``"ttnn.CoreGrid(x=2, y=1)"``),
plus ``suite_name``, ``validity``, ``invalid_reason``, ``status``, ``sweep_name``, ``timestamp``,
``input_hash`` (sha224 of ``str()`` of the serialised parameters) and ``tag``.
Results: a JSON list of ``{sweep_name, suite_name, vector_id, input_hash, status, message,
device_perf: {"DEVICE KERNEL DURATION [ns]": mean, "..._std": std, ..., "runs": n}, ...}``."""

from __future__ import annotations

import getpass
import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from opatlas.errors import OpatlasError
from opatlas.store import ResultRow, Store
from opatlas.sweep import params_json, vector_id

SWEEP_NAME = "data_movement.reshard.reshard"
EXPORT_OP = "reshard"
STATUS = {"TestStatus.PASS": "ok", "TestStatus.FAIL_L1_OUT_OF_MEM": "oom",
          "TestStatus.FAIL_CRASH_HANG": "timeout", "TestStatus.FAIL_ASSERT_EXCEPTION": "error",
          "TestStatus.FAIL_WATCHER": "error", "TestStatus.NOT_RUN": "invalid",
          "TestStatus.FAIL_UNSUPPORTED_DEVICE_PERF": "error"}


def serialize(params: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in params.items():
        if k in ("input_core_grid", "output_core_grid"):
            x, _, y = str(v).partition("x")
            out[k] = f"ttnn.CoreGrid(x={x}, y={y})"
        elif k.endswith("_strategy"):
            out[k] = f"ShardStrategy.{v}"
        elif k.endswith("_orientation"):
            out[k] = f"ShardOrientation.{v}"
        elif k == "dtype":
            out[k] = f"DataType.{str(v).upper()}"
        else:
            out[k] = str(v)
    return out


def deserialize(vec: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in ("input_shape", "input_core_grid", "output_core_grid", "input_shard_strategy",
              "output_shard_strategy", "input_shard_orientation", "output_shard_orientation",
              "dtype"):
        v = vec[k]
        if k == "input_shape":
            out[k] = json.loads(v)
        elif k.endswith("core_grid"):
            inner = v[v.index("(") + 1: v.index(")")]
            kv = dict(part.strip().split("=") for part in inner.split(","))
            out[k] = f"{int(kv['x'])}x{int(kv['y'])}"
        elif k == "dtype":
            out[k] = v.split(".")[-1].lower()
        else:
            out[k] = v.split(".")[-1]
    return out


def input_hash(serialized: dict[str, str]) -> str:
    return hashlib.sha224(str(serialized).encode()).hexdigest()


def check_reshard(op: str) -> None:
    """Only ``reshard`` vectors have tt-metal's reshard sweep layout: anything else is refused
    before a file is written."""
    from opatlas.ops import get_op

    if get_op(op)[0].name != EXPORT_OP:
        raise OpatlasError(f"export-tt writes tt-metal's reshard sweep vectors: it needs a "
                           f"{EXPORT_OP} spec (e.g. the built-in '{EXPORT_OP}'), and this "
                           f"spec's op is '{op}'")


def export_tt(vectors: list, outdir: str | Path,
              on_file: Callable[[int], object] | None = None) -> list[Path]:
    """Write the seed's ``vectors_export`` layout; returns the files written. ``on_file``
    hears how many vectors each file written held (for progress)."""
    for op in sorted({v.op for v in vectors}):
        check_reshard(op)
    outdir = Path(outdir)
    files: dict[Path, dict[str, dict[str, Any]]] = {}
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    tag = getpass.getuser()
    for v in vectors:
        p = v.params
        suite = f"{p['input_core_grid']}-{p['output_core_grid']}-{p['dtype']}"
        path = outdir / p["input_core_grid"] / \
            f"reshard-{p['input_core_grid']}-{p['output_core_grid']}.json"
        ser = serialize(dict(p))
        h = input_hash(ser)
        files.setdefault(path, {}).setdefault(suite, {})[h] = {
            **ser, "suite_name": suite, "validity": "VectorValidity.VALID", "invalid_reason": "",
            "status": "VectorStatus.CURRENT", "sweep_name": SWEEP_NAME, "timestamp": stamp,
            "input_hash": h, "tag": tag}
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=1))
        if on_file is not None:
            on_file(sum(len(suite) for suite in content.values()))
    return sorted(files)


def _json_file(path: Path, kind: type, what: str) -> Any:
    """The JSON document of ``path``, which must be ``kind`` (``what`` says it in words)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise OpatlasError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(doc, kind):
        raise OpatlasError(f"{path}: holds a {type(doc).__name__}, not {what}")
    return doc


def _counts(params: dict[str, Any]) -> tuple[float | None, float | None]:
    """The fwd FLOPs and minimum bytes of a reshard, counted by the op catalog as a run's rows
    are (:class:`opatlas.run.records.RowBuilder`): (None, None) where it cannot count them
    (a dtype it does not know); a count never loses a measurement."""
    from opatlas.ops.registry import catalog_counts

    flops, nbytes = catalog_counts(EXPORT_OP, params)
    return flops.get("fwd"), nbytes.get("fwd")


def import_tt(store: Store, vectors_dir: str | Path, results_dir: str | Path,
              device: str = "wormhole_b0") -> int:
    """Join tt-metal result JSON with the exported vectors (by ``input_hash``) into the store."""
    for option, folder in (("--vectors", vectors_dir), ("--results", results_dir)):
        if not Path(folder).is_dir():
            raise OpatlasError(f"{option} {folder}: no such folder")
    vecs: dict[str, dict[str, Any]] = {}
    for f in Path(vectors_dir).rglob("*.json"):
        suites = _json_file(f, dict, "an object of suites, each of vectors by hash")
        for suite in suites.values():
            if not isinstance(suite, dict):
                raise OpatlasError(f"{f}: a suite is not an object of vectors by hash")
            for h, vec in suite.items():
                vecs[h] = deserialize(vec)
    if not vecs:
        raise OpatlasError(f"no exported vectors under {vectors_dir}")
    rows = []
    for f in Path(results_dir).rglob("*.json"):
        for r in _json_file(f, list, "a list of results"):
            if not isinstance(r, dict):
                raise OpatlasError(f"{f}: a result is {type(r).__name__}, not an object")
            params = vecs.get(r.get("input_hash") or r.get("vector_id"))
            if params is None:
                continue
            perf = r.get("device_perf") or {}
            status = STATUS.get(r.get("status", ""), "error")
            mean = perf.get("DEVICE KERNEL DURATION [ns]")
            flops, nbytes = _counts(params)
            row = ResultRow(vector_id=vector_id("reshard", params), op="reshard",
                            params_json=params_json(params), pass_="fwd", backend="ttnn",
                            device=device, dtype=params["dtype"],
                            status=status if mean is not None or status != "ok" else "error",
                            message=str(r.get("message", ""))[:2000],
                            repeats=int(perf.get("runs", 0) or 0), flops=flops,
                            min_bytes=nbytes)
            if mean is not None and status == "ok":
                row.mean_ns = row.median_ns = float(mean)
                std = perf.get("DEVICE KERNEL DURATION [ns]_std")
                row.std_ns = None if std is None else float(std)
            rows.append(row)
    if not rows:
        raise OpatlasError(f"no results under {results_dir} match the vectors in {vectors_dir}")
    return store.add_results(rows)
