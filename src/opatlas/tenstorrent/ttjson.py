"""tt-metal sweep-framework files: the seed's vector export layout, and its result JSON.

Export: ``vectors_export/<in_grid>/reshard-<in_grid>-<out_grid>.json`` holding
``{suite_name: {input_hash: vector}}`` (suite names as tt-metal's sweep builds them:
``"1x4-4x1-DataType.BFLOAT16"``; the import reads no suite name, so any spelling imports);
every parameter serialised as the framework does (``str(obj)``: ``"ShardStrategy.BLOCK"``,
``"[1, 1, 64, 96]"``, ``"ttnn.CoreGrid(x=2, y=1)"``),
plus ``suite_name``, ``validity``, ``invalid_reason``, ``status``, ``sweep_name``, ``timestamp``,
``input_hash`` (sha224 of ``str()`` of the serialised parameters) and ``tag``.
Results: a JSON list of ``{sweep_name, suite_name, vector_id, input_hash, status, message,
device_perf: {"DEVICE KERNEL DURATION [ns]": mean, "..._std": std, ..., "runs": n}, ...}``."""

from __future__ import annotations

import getpass
import hashlib
import json
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from opatlas.console import counted
from opatlas.errors import OpatlasError
from opatlas.store import ResultRow, Store
from opatlas.sweep import params_json, vector_id
from opatlas.tenstorrent.reshard import suite_name

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
        suite = suite_name(p["input_core_grid"], p["output_core_grid"], p["dtype"])
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
    """Join tt-metal result JSON with the exported vectors (by ``input_hash``) into the store;
    returns the count of rows added (vectors the store had no row of). What is not added is
    said on stderr: results of no exported vector, rows the store holds already, and the
    failures it holds that the import replaces."""
    for option, folder in (("--vectors", vectors_dir), ("--results", results_dir)):
        if not Path(folder).is_dir():
            raise OpatlasError(f"{option} {folder}: no such folder")
    vecs = _exported_vectors(Path(vectors_dir))
    rows, unmatched = _result_rows(Path(results_dir), vecs, device)
    if unmatched:
        _say(f"{results_dir}: skipped {counted(len(unmatched), 'result')} whose input_hash "
             f"matches no vector exported under {vectors_dir} (e.g. {unmatched[0]!r}): "
             f"not imported")
    if not rows:
        raise OpatlasError(f"no results under {results_dir} match the vectors in {vectors_dir}")
    _say_errors(results_dir, rows)
    fate = _fate(store, rows, device)
    write = [r for r in rows if fate[_key(r)] in ("added", "replaced")]
    store.add_results(write)
    _say_fate(fate)
    return sum(1 for f in fate.values() if f == "added")


def _say(text: str) -> None:
    print(f"opatlas: {text}", file=sys.stderr)


def _exported_vectors(folder: Path) -> dict[str, dict[str, Any]]:
    """The exported vectors' parameters by ``input_hash``."""
    vecs: dict[str, dict[str, Any]] = {}
    for f in folder.rglob("*.json"):
        suites = _json_file(f, dict, "an object of suites, each of vectors by hash")
        for suite in suites.values():
            if not isinstance(suite, dict):
                raise OpatlasError(f"{f}: a suite is not an object of vectors by hash")
            for h, vec in suite.items():
                vecs[h] = deserialize(vec)
    if not vecs:
        raise OpatlasError(f"no exported vectors under {folder}")
    return vecs


def _result_rows(folder: Path, vecs: dict[str, dict[str, Any]], device: str
                 ) -> tuple[list[ResultRow], list[str]]:
    """The rows of the results that match an exported vector, and the hashes of those that
    match none."""
    rows, unmatched = [], []
    for f in sorted(folder.rglob("*.json")):
        for r in _json_file(f, list, "a list of results"):
            if not isinstance(r, dict):
                raise OpatlasError(f"{f}: a result is {type(r).__name__}, not an object")
            h = r.get("input_hash") or r.get("vector_id")
            params = vecs.get(h) if isinstance(h, str) else None
            if params is None:
                unmatched.append(str(h))
                continue
            rows.append(_row(r, params, device))
    return rows, unmatched


# why a result became an error row (its message starts so), for the notes on stderr
UNKNOWN_STATUS = "tt-metal status not known to opatlas"
NO_DURATION = "TestStatus.PASS without a device kernel duration"


def _row(r: dict[str, Any], params: dict[str, Any], device: str) -> ResultRow:
    perf = r.get("device_perf") or {}
    raw = str(r.get("status", ""))
    mean = perf.get("DEVICE KERNEL DURATION [ns]")
    message = str(r.get("message") or "")
    status = STATUS.get(raw)
    if status is None:
        status, message = "error", _joined(f"{UNKNOWN_STATUS}: {raw or '(none)'}", message)
    elif status == "ok" and mean is None:
        status, message = "error", _joined(f"{NO_DURATION} (device_perf has no 'DEVICE "
                                           f"KERNEL DURATION [ns]')", message)
    flops, nbytes = _counts(params)
    row = ResultRow(vector_id=vector_id("reshard", params), op="reshard",
                    params_json=params_json(params), pass_="fwd", backend="ttnn",
                    device=device, dtype=params["dtype"], status=status,
                    message=message[:2000], repeats=int(perf.get("runs", 0) or 0),
                    flops=flops, min_bytes=nbytes)
    if status == "ok":
        row.mean_ns = row.median_ns = float(mean)
        std = perf.get("DEVICE KERNEL DURATION [ns]_std")
        row.std_ns = None if std is None else float(std)
    return row


def _joined(why: str, message: str) -> str:
    return f"{why}; {message}" if message else why


def _say_errors(results_dir: str | Path, rows: list[ResultRow]) -> None:
    """Name the results recorded as errors for a reason of the import's, not tt-metal's."""
    for why, noun, what in ((UNKNOWN_STATUS, "result", "with a status opatlas does not know"),
                            (NO_DURATION, "PASS result", "without a device kernel duration")):
        hits = [r for r in rows if r.message.startswith(why)]
        if hits:
            _say(f"{results_dir}: {counted(len(hits), noun)} {what} recorded as error, "
                 f"saying so in its message (e.g. {hits[0].message!r})")


def _key(r: ResultRow) -> tuple[str, str]:
    return r.vector_id, r.dtype


def _fate(store: Store, rows: list[ResultRow], device: str) -> dict[tuple[str, str], str]:
    """What the store makes of each row's key (the first row of a key wins, as it does):
    ``added`` (no row yet), ``kept`` (a final row, which the store keeps), ``replaced`` (a
    failure the row answers or changes), ``unchanged`` (the same failure again: not written,
    where the store would swap it for its copy)."""
    from opatlas.store.db import FINAL_STATUSES

    first: dict[tuple[str, str], ResultRow] = {}
    for r in rows:
        first.setdefault(_key(r), r)
    held = store.con.execute(
        "SELECT vector_id, dtype, status, message, repeats FROM results WHERE backend = 'ttnn' "
        "AND pass = 'fwd' AND device = ? AND vector_id IN (SELECT unnest(?::VARCHAR[]))",
        [device, sorted({k[0] for k in first})]).fetchall()
    old = {(v, d): (st, msg or "", rep) for v, d, st, msg, rep in held}
    fate = {}
    for k, r in first.items():
        if k not in old:
            fate[k] = "added"
        elif old[k][0] in FINAL_STATUSES:
            fate[k] = "kept"
        elif r.status not in FINAL_STATUSES and old[k] == (r.status, r.message, r.repeats):
            fate[k] = "unchanged"
        else:
            fate[k] = "replaced"
    return fate


def _say_fate(fate: dict[tuple[str, str], str]) -> None:
    n = Counter(fate.values())
    parts = [text for text in (
        n["replaced"] and f"{counted(n['replaced'], 'failed row')} replaced",
        n["kept"] and f"{counted(n['kept'], 'vector')} recorded already (the store keeps "
                      f"its row)",
        n["unchanged"] and f"{counted(n['unchanged'], 'failure')} recorded already (the same "
                           f"failure again)")
        if text]
    if parts:
        _say(f"tt-sweep import: not added: {'; '.join(parts)}")
