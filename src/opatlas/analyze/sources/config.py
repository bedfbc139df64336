"""A training config (anything ``opatlas estimate`` accepts): the estimator's itemised step of the
slowest pipeline device, one row per (op, pass), collective, bubble and optimizer, adding up
to the step time exactly; with the bounds that explain each row.

``--measured STORE``: where the store measured the same op, pass and shape on the same device
and dtype, the measurement replaces the prediction (per call), the bubble follows the stage's
new time (it is the stage time times the schedule's bubble fraction), and ``error`` shows
prediction vs measurement: PyBuda's cache feedback, where measured kernels override the
estimate."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from opatlas.analyze.model import Analysis, Column, Source
from opatlas.analyze.sources import ReadOptions, SourceKind, register
from opatlas.analyze.why import WHY_FIRST, WHY_REST, Peaks, explain, gemm_of, pass_gemms
from opatlas.errors import OpatlasError

_LIMITER = {"tp_comm": "communication", "ep_comm": "communication", "p2p": "communication",
            "dp_comm": "communication", "pp_bubble": "bubble"}
_STAGE_CATEGORIES = ("compute", "tp_comm", "ep_comm", "p2p")  # what one stage's time is made of

COLUMNS = [
    Column(key="op", label="op", role="id"),
    Column(key="pass", label="pass", role="id"),
    Column(key="group", label="stage", role="group"),
    Column(key="category", label="category", role="text"),
    Column(key="calls", label="calls", role="count", help="calls per optimizer step"),
    Column(key="time_s", label="time", role="estimated", unit="s",
           help="all calls in one step (measured where --measured has the op)"),
    Column(key="timed_by", label="timed by", role="text",
           help="what timed an op: the roofline (ops.mode analytical, or an op the data "
                "lacks), a fitted model (ops.mode data) or a measurement (--measured)"),
    *WHY_FIRST,
    Column(key="flops", label="FLOPs", role="count", unit="FLOP"),
    Column(key="bytes", label="bytes", role="count", unit="B",
           help="minimum bytes for kernels, message bytes for collectives"),
    *WHY_REST,
    Column(key="shape", label="shape", role="shape"),
]
MEASURED_COLUMNS = [
    Column(key="predicted_time_s", label="predicted", role="estimated", unit="s"),
    Column(key="measured_time_s", label="measured", role="measured", unit="s"),
    Column(key="error", label="error", role="error", unit="%",
           help="(predicted - measured) / measured"),
]


def detect(path: Path) -> bool:
    """What ``opatlas estimate`` reads as its config: a YAML, a Hugging Face config.json (or
    the folder holding one) or a training config in JSON, or a bundled name (a YAML example
    or a Hugging Face config: ``qwen2.5-7b``, whose dot is no suffix)."""
    if not path.exists():  # a bare name only: typo/llama2-7b.yml is a missing file
        return len(path.parts) == 1 and bundled(path.name)
    if path.is_dir():
        return _is_config_json(path / "config.json")
    return path.suffix in (".yml", ".yaml") or (path.suffix == ".json"
                                                and _is_config_json(path))


def bundled(name: str) -> bool:
    """A bundled example YAML or Hugging Face config of that name (as ``read_config`` finds
    them)."""
    from importlib import resources

    from opatlas.estimate.hf import bundled_hf

    example = resources.files("opatlas") / "data" / "configs" / f"{name.removesuffix('.yml')}.yml"
    return example.is_file() or bundled_hf(name) is not None


# a training config or a Hugging Face config.json is a few KB; a larger .json is a trace
_CONFIG_JSON_MAX_BYTES = 1 << 20


def _is_config_json(path: Path) -> bool:
    """A small JSON mapping that ``read_config`` takes: a Hugging Face config, an
    estimate-train-time one or an opatlas one (a ``model`` section); not a trace nor a saved
    analysis (detected after the configs)."""
    from opatlas.estimate.hf import is_hf_config

    try:
        if not path.is_file() or path.stat().st_size > _CONFIG_JSON_MAX_BYTES:
            return False
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or "traceEvents" in data \
            or data.get("format") == "opatlas-analysis":
        return False  # a profiler trace, a saved analysis
    return is_hf_config(data) or "training_config" in data or isinstance(data.get("model"), dict)


# the options of ``opatlas estimate`` that shape the estimate (ReadOptions.extra keys)
ESTIMATE_OPTIONS = ("megatron_args", "gpus", "gpus_per_node", "sets", "analytical")
MEGATRON_LABEL = "--megatron-args"  # the source's path when the arguments are inline


def estimate_inputs(options: ReadOptions) -> dict[str, Any]:
    """The estimate options given (``--gpus`` ...), as the summary keeps them: what
    re-estimating the same step (``--trace``, ``--load``) needs besides the path."""
    return {k: options.extra[k] for k in ESTIMATE_OPTIONS if options.extra.get(k)}


def estimate_for(path: Path, options: ReadOptions | None = None) -> Any:
    """The estimate the analysis of ``path`` shows (also what ``--trace`` exports), with
    ``opatlas estimate``'s options in ``options.extra`` (ESTIMATE_OPTIONS); its notes begin
    with what loading the config assumed (defaults, presets, links), as ``opatlas estimate``
    says them."""
    from opatlas.estimate import estimate_step
    from opatlas.estimate.inputs import derived_collectives, load_inputs, with_flags

    options = options or ReadOptions()
    given = estimate_inputs(options)
    megatron = given.get("megatron_args")
    # the arguments stand for the config: the path is then their label, not a file
    config = None if megatron and str(path) in (megatron, MEGATRON_LABEL) else str(path)
    loaded: list[str] = []
    cfg = load_inputs(config, megatron_args=megatron, gpus=given.get("gpus"),
                      gpus_per_node=given.get("gpus_per_node"), sets=given.get("sets") or (),
                      strict=options.strict, notes=loaded,
                      analytical=bool(given.get("analytical"))).config
    cfg = with_flags(cfg, options.strict, bool(given.get("analytical")), loaded)
    est = estimate_step(cfg)
    if cfg.ops.mode == "analytical":  # the util and headroom columns then echo the input
        loaded.append(analytical_note(cfg.ops.compute_efficiency, cfg.ops.memory_efficiency))
    loaded.extend(derived_collectives(cfg, [est]))
    est.notes = [*loaded, *est.notes]
    return est


def analytical_note(compute: float, memory: float) -> str:
    """What util and headroom mean for ops the roofline timed at these shares of the peaks
    (``why.explain``): they restate the shares only where the side that sets an op's time
    sets its bound too, by that side's own roof."""
    return (f"ops timed by the roofline at {compute:g} of peak compute and {memory:g} of the "
            f"bandwidth (ops.mode: analytical), not measured (ops.mode: data, or --measured "
            f"STORE): their util and headroom are those factors (util the factor of the side, "
            f"compute or memory, that sets an op's time; headroom its inverse) only where that "
            f"side's roof is also the op's bound; where a GEMM's Orojenesis traffic is the bound "
            f"and memory sets the time, util is the memory factor and headroom less than its "
            f"inverse (the time over that traffic at the full bandwidth); where the other side "
            f"sets the bound (its roof, or that traffic), util is that side's achieved share of "
            f"its peak and headroom the time over the bound")


def estimate_of(analysis: Analysis) -> Any:
    """The estimate a config analysis (read now or kept with --save) was made from: its
    path with the estimate options it was read with."""
    inputs = analysis.summary.get("estimate_inputs") or {}
    return estimate_for(Path(analysis.source.path), ReadOptions(extra=dict(inputs)))


def _check_fits(est: Any, strict: bool) -> None:
    """A layout that does not fit in memory: said (a note, on stderr), an error under
    --strict, as ``opatlas estimate`` does."""
    from opatlas.estimate.inputs import out_of_memory

    msg = out_of_memory(est)
    if msg is None:
        return
    if strict:
        raise OpatlasError(f"{msg}; --strict")
    est.notes.append(f"{msg}; --strict makes this an error (--gpus N, or --set parallel.KEY=... "
                     f"for another layout)")


def read(path: Path, options: ReadOptions) -> Analysis:
    est = estimate_for(path, options)
    _check_fits(est, options.strict)
    rows = _rows(est)
    columns = list(COLUMNS)
    if options.measured is not None:
        rows = _apply_measured(rows, est, options.measured, options.strict)
        at = [c.key for c in columns].index("time_s") + 1
        columns[at:at] = MEASURED_COLUMNS
    peaks = _peaks(est)
    total = float(rows["time_s"].sum())
    analysed = explain(rows, peaks, total)
    summary = _summary(est, peaks, analysed, total)
    if inputs := estimate_inputs(options):
        summary["estimate_inputs"] = inputs
    return Analysis(Source(kind="config", path=str(path)), summary, analysed, columns, "stage")


def _peaks(est: Any) -> Peaks:
    from opatlas.devices import get_device
    from opatlas.ops.base import dtype_bytes

    dev = get_device(est.config.cluster.device)
    dtype = est.config.training.dtype
    return Peaks(dev.name, dev.peak(dtype), dev.bandwidth, dev.onchip_bytes, dtype_bytes(dtype))


def slowest_stage(est: Any) -> int:
    """The pipeline stage the items describe: the one with the embedding (first) or the head
    (last), else the middle stage with the most layers (the first of equals, as the engine)."""
    names = {it.name for it in est.items}
    pp = est.config.parallel.pp
    if "linear_final" in names:
        return pp - 1
    if "embedding" in names:
        return 0
    middle = est.stages[1:pp - 1]  # equal layers give equal times: the engine takes the first
    return 1 + int(np.argmax(middle)) if middle else 0


_DATA_NAMES = {"optimizer": "middleStage_optimizer"}  # a row's op as the data names it


def _timed_by(est: Any) -> Callable[[str, str], str]:
    """(op, pass) -> what the estimator timed that op row by: ``roofline`` (ops.mode
    analytical, or in ops.mode data an op the data lacks) or ``model``."""
    if est.config.ops.mode != "data":
        return lambda op, pass_: "roofline"
    fallback = est.roofline_ops

    def timed(op: str, pass_: str) -> str:
        counted = "fwd" if pass_ == "recompute" else pass_
        return "roofline" if f"{_DATA_NAMES.get(op, op)}/{counted}" in fallback else "model"
    return timed


def _rows(est: Any) -> pd.DataFrame:
    from opatlas.ops.batch import batch_counts

    dtype = est.config.training.dtype
    stage = slowest_stage(est)
    timed_by = _timed_by(est)
    out = []
    for it in est.items:
        row: dict[str, Any] = {"op": it.name, "pass": it.pass_, "category": it.category,
                               "calls": it.calls, "time_s": it.time_s, "shape": dict(it.shape),
                               "group": stage, "gemms": None, "limiter": _LIMITER.get(it.category),
                               "comm_bound_s": math.nan, "timed_by": None}
        if it.category in ("compute", "optimizer"):
            row["timed_by"] = timed_by(it.name, it.pass_)
            op = "adam_step" if it.category == "optimizer" else it.name
            counted = "fwd" if it.pass_ == "recompute" else it.pass_
            c = batch_counts(op, pd.DataFrame([{**it.shape, "dtype": dtype}])).iloc[0]
            row["flops"] = it.calls * float(c.get(f"flops_{counted}", math.nan))
            row["bytes"] = it.calls * float(c.get(f"bytes_{counted}", math.nan))
            if it.category == "optimizer":  # the mixed-precision passes around the Adam kernel
                row["bytes"] += it.calls * float(it.shape.get("n_params", 0.0)) * float(
                    it.shape.get("passes_bytes_per_param", 0.0))
            g = gemm_of(c)
            if g is not None:
                row["gemms"] = pass_gemms(g, it.pass_)
                row["gemm"] = list(g)
        elif it.pass_ == "comm":
            per_call = float(it.shape.get("bytes", 0.0))
            if it.category == "dp_comm":  # one pass over the gradients, a bucket a call
                per_call /= max(float(it.shape.get("buckets", 1.0)), 1.0)
            row["flops"], row["bytes"] = 0.0, it.calls * per_call
            if not (it.category == "dp_comm" and est.config.parallel.dp_overlap):
                row["comm_bound_s"] = it.calls * _comm_bound_per_call(est, it, per_call)
        else:
            row["flops"], row["bytes"] = 0.0, 0.0
        out.append(row)
    return pd.DataFrame(out)


def _comm_bound_per_call(est: Any, it: Any, nbytes: float) -> float:
    """The least seconds one call of collective ``it`` moving ``nbytes`` can take where the
    estimator places its ranks: its alpha-beta time without latency, over the link those
    ranks cross (NVLink within a node; the network, per rail, once the group spans nodes, as
    a p2p between pipeline stages on different nodes does). The placement is the engine's own
    (``engine.collective_time``: which ranks share a node, from the group's size and stride)."""
    from opatlas.estimate.comm import AlphaBeta
    from opatlas.estimate.engine import collective_time

    cluster = est.config.cluster
    comm = AlphaBeta(cluster.model_copy(update={"intra_latency_us": 0.0,
                                                "inter_latency_us": 0.0}))
    return sum(collective_time(comm, it.name, share * nbytes, ranks, stride,
                               cluster.gpus_per_node)
               for share, ranks, stride in _placements(est, it))


def _placements(est: Any, it: Any) -> list[tuple[float, int, int]]:
    """(share of the row's bytes, ranks, stride) of each group that moves a collective row,
    as the engine places it (``engine.group_stride``; the data-parallel groups' own)."""
    from opatlas.estimate.engine import group_stride

    if it.category == "dp_comm":
        return _dp_groups(est)
    stride = group_stride(est.config.parallel, it.category, it.name)
    return [(1.0, int(it.shape.get("ranks", 2)), stride)]


def _dp_groups(est: Any) -> list[tuple[float, int, int]]:
    """(share of a data-parallel row's bytes, ranks, stride) per group that moves them, as the
    estimator charges them (``engine.dp_groups``)."""
    from opatlas.estimate.engine import _busiest, _params_per_device, dp_groups

    params, _, experts = _busiest(_params_per_device(est.config))
    groups = dp_groups(est.config.parallel, params, experts)
    return [(n / params if params > 0 else 0.0, ranks, stride)
            for (ranks, stride), n in groups.items()]


def _apply_measured(rows: pd.DataFrame, est: Any, store_path: Path, strict: bool
                    ) -> pd.DataFrame:
    """The rows with measured times where the store has them (notes in ``est.notes``)."""
    measured = _measured_per_call(store_path, est)
    rows = rows.copy()
    rows["predicted_time_s"] = rows["time_s"]
    rows["measured_time_s"] = np.nan
    for i, r in rows.iterrows():
        if r["category"] != "compute":
            continue
        counted = "fwd" if r["pass"] == "recompute" else r["pass"]
        key = (r["op"], counted, _shape_key(r["shape"]))
        if key in measured:
            rows.at[i, "measured_time_s"] = measured[key] * r["calls"]
    hit = rows["measured_time_s"].notna()
    if not hit.any():
        from opatlas.devices import get_device

        msg = (f"{store_path}: no measurement matches an op, pass and shape of this config on "
               f"{get_device(est.config.cluster.device).name} {est.config.training.dtype}")
        if strict:
            raise OpatlasError(f"{msg}; --strict refuses to show the prediction instead")
        est.notes.append(f"{msg}; the prediction is kept (the rows, the step time and the "
                         f"timeline all show the predicted schedule)")
    else:  # only then do the rows differ from the schedule the timeline draws
        est.notes.append(f"{int(hit.sum())} of the rows use the measurements of {store_path} "
                         f"(and so does the step time); the timeline (and --trace) show the "
                         f"predicted schedule")
    rows.loc[hit, "time_s"] = rows.loc[hit, "measured_time_s"]
    rows.loc[hit, "timed_by"] = "measured"
    rows["error"] = (rows["predicted_time_s"] - rows["measured_time_s"]) / rows["measured_time_s"]
    stage_before = rows.loc[rows["category"].isin(_STAGE_CATEGORIES), "predicted_time_s"].sum()
    stage_after = rows.loc[rows["category"].isin(_STAGE_CATEGORIES), "time_s"].sum()
    bubble = rows["category"] == "pp_bubble"
    if stage_before > 0:
        rows.loc[bubble, "time_s"] = rows.loc[bubble, "predicted_time_s"] * stage_after / stage_before
    return rows


def _shape_key(shape: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in sorted(shape.items()) if k != "dtype"})


def _measured_per_call(store_path: Path, est: Any) -> dict[tuple[str, str, str], float]:
    """(op, pass, shape) -> measured median seconds per call, on the config's device and dtype.
    A stored shape matches an item's when the item has every stored parameter, equal."""
    from opatlas.devices import get_device
    from opatlas.store import Store

    if not store_path.is_file():
        raise OpatlasError(f"--measured {store_path}: no such results store")
    with Store(store_path, read_only=True) as st:
        res = st.results(status="ok", expand_params=False)
    want = get_device(est.config.cluster.device).name

    def same_device(name: str) -> bool:
        try:
            return get_device(name).name == want
        except OpatlasError:
            return False

    res = res[res["dtype"].eq(est.config.training.dtype) & res["device"].map(same_device)]
    stored: dict[tuple[str, str], list[tuple[dict[str, Any], float]]] = {}
    for op, pass_, pj, ns in res[["op", "pass", "params_json", "median_ns"]].itertuples(
            index=False):
        params = {k: v for k, v in json.loads(pj).items() if k != "dtype"}
        stored.setdefault((op, pass_), []).append((params, float(ns) * 1e-9))
    out: dict[tuple[str, str, str], float] = {}
    for it in est.items:
        counted = "fwd" if it.pass_ == "recompute" else it.pass_
        for params, seconds in stored.get((it.name, counted), []):
            if all(k in it.shape and it.shape[k] == v for k, v in params.items()):
                out[(it.name, counted, _shape_key(dict(it.shape)))] = seconds
                break
    return out


def _summary(est: Any, peaks: Peaks, rows: pd.DataFrame, total: float) -> dict[str, Any]:
    c, p = est.config, est.config.parallel
    seq = c.model.seq_len
    tokens = c.training.global_batch * seq
    out: dict[str, Any] = {
        "title": f"{c.model.name} on {c.gpus} x {peaks.name}",  # the catalog's name
        "total_time_s": total, "total_time_label": "estimated step time", "step_time_s": est.step_time_s,
        "throughput": tokens / total, "throughput_unit": "tokens/s",
        "samples_per_s": c.training.global_batch / total,
        "utilization": est.mfu * est.step_time_s / total, "utilization_label": "MFU",
        "layout": f"dp{p.dp} tp{p.tp} pp{p.pp} ep{p.ep} {p.schedule} mb{c.training.micro_batch} "
                  f"zero{p.zero} recompute={p.recompute}",
        "device": peaks.name, "dtype": c.training.dtype, "peak_flops_s": peaks.flops_s,
        "peak_bytes_s": peaks.bytes_s, "onchip_bytes": peaks.onchip_bytes,
        "word_bytes": peaks.word_bytes, "memory_gib": est.memory_gib,
        "memory_stage": est.memory_stage, "fits": est.fits,  # the fullest, not the rows' stage
        "stage": int(rows["group"].iloc[0]) if len(rows) else 0, "stages": p.pp,
        "notes": list(est.notes)}
    if "error" in rows and rows["error"].notna().any():
        hit = rows["measured_time_s"].notna()
        pred, meas = rows.loc[hit, "predicted_time_s"].sum(), rows.loc[hit, "measured_time_s"].sum()
        out["estimation_error"] = float((pred - meas) / meas)
        out["step_time_s"], out["predicted_step_time_s"] = total, est.step_time_s
        # the rows (and the first card) add up to the step with the measured times; the
        # estimator's step stays beside it as "predicted step time"
        out["total_time_label"] = "step time (measured where stored)"
    out["timeline"] = _timeline(est)
    return out


def _timeline(est: Any) -> list[dict[str, Any]]:
    """The pipeline schedule's blocks (opatlas.analyze.timeline), for the report's timeline."""
    from opatlas.analyze.timeline import step_timeline

    return [{k: getattr(b, k) for k in ("stage", "lane", "name", "micro_batch", "chunk", "kind",
                                        "start_s", "dur_s")}
            for b in step_timeline(est) if b.depth == 0]  # the schedule; ops inside are rows


register(SourceKind("config", detect, read,
                    "a training config (YAML, a Hugging Face config.json) or a bundled "
                    "example such as llama2-7b or qwen3-8b; or --megatron-args",
                    uses=frozenset({"measured", *ESTIMATE_OPTIONS})))
