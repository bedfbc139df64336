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
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from opatlas.analyze.model import Analysis, Column, Source
from opatlas.analyze.sources import ReadOptions, SourceKind, register
from opatlas.analyze.why import WHY_FIRST, WHY_REST, Peaks, backward_gemms, explain, gemm_of
from opatlas.errors import OpatlasError

# a collective's bus traffic per byte of message (nccl-tests' factors), for n ranks
_BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
        "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
        "p2p": lambda n: 1.0}
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
    if path.suffix in (".yml", ".yaml"):
        return True
    if path.suffix or path.exists():
        return False
    from importlib import resources

    bundled = resources.files("opatlas") / "data" / "configs" / f"{path.name}.yml"
    return bundled.is_file()


def estimate_for(path: Path, options: ReadOptions | None = None) -> Any:
    """The estimate the analysis of ``path`` shows (also what ``--trace`` exports); its notes
    begin with what loading the config assumed (defaults, presets, links), as ``opatlas
    estimate`` says them."""
    from opatlas.estimate import estimate_step
    from opatlas.estimate.inputs import load_inputs

    loaded: list[str] = []
    cfg = load_inputs(str(path), notes=loaded).config
    est = estimate_step(cfg)
    if cfg.ops.mode == "analytical":  # the util and headroom columns then echo the input
        loaded.append(f"ops timed by the roofline at {cfg.ops.compute_efficiency:g} of peak "
                      f"compute and {cfg.ops.memory_efficiency:g} of the bandwidth (ops.mode: "
                      f"analytical): their util and headroom are those factors, not "
                      f"measurements (ops.mode: data, or --measured STORE)")
    est.notes = [*loaded, *est.notes]
    return est


def read(path: Path, options: ReadOptions) -> Analysis:
    est = estimate_for(path, options)
    rows = _rows(est)
    columns = list(COLUMNS)
    if options.measured is not None:
        rows = _apply_measured(rows, est, options.measured, options.strict)
        columns[6:6] = MEASURED_COLUMNS
        est.notes.append("the timeline (and --trace) show the predicted schedule; the rows "
                         "and the step time use the measurements")
    peaks = _peaks(est)
    total = float(rows["time_s"].sum())
    analysed = explain(rows, peaks, total)
    return Analysis(Source(kind="config", path=str(path)), _summary(est, peaks, analysed, total),
                    analysed, columns, "stage")


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


def _rows(est: Any) -> pd.DataFrame:
    from opatlas.ops.batch import batch_counts

    dtype = est.config.training.dtype
    stage = slowest_stage(est)
    out = []
    for it in est.items:
        row: dict[str, Any] = {"op": it.name, "pass": it.pass_, "category": it.category,
                               "calls": it.calls, "time_s": it.time_s, "shape": dict(it.shape),
                               "group": stage, "gemms": None, "limiter": _LIMITER.get(it.category),
                               "comm_bound_s": math.nan}
        if it.category in ("compute", "optimizer"):
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
                row["gemms"] = backward_gemms(g) if it.pass_ == "bwd" else [g]
                row["gemm"] = list(g)
        elif it.pass_ == "comm":
            per_call = float(it.shape.get("bytes", 0.0))
            if it.category == "dp_comm":  # one pass over the gradients, a bucket a call
                per_call /= max(float(it.shape.get("buckets", 1.0)), 1.0)
            row["flops"], row["bytes"] = 0.0, it.calls * per_call
            if not (it.category == "dp_comm" and est.config.parallel.dp_overlap):
                n = int(it.shape.get("ranks", 2))
                link = est.config.cluster.intra_bw_gbps * 1e9  # the fastest link: a lower bound
                row["comm_bound_s"] = it.calls * _BUS[it.name](n) * per_call / link
        else:
            row["flops"], row["bytes"] = 0.0, 0.0
        out.append(row)
    return pd.DataFrame(out)


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
        msg = (f"{store_path}: no measurement matches an op, pass and shape of this config on "
               f"{est.config.cluster.device} {est.config.training.dtype}")
        if strict:
            raise OpatlasError(f"{msg}; --strict refuses to show the prediction instead")
        est.notes.append(f"{msg}; the prediction is kept")
    rows.loc[hit, "time_s"] = rows.loc[hit, "measured_time_s"]
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
        "total_time_s": total, "total_time_label": "step time", "step_time_s": est.step_time_s,
        "throughput": tokens / total, "throughput_unit": "tokens/s",
        "samples_per_s": c.training.global_batch / total,
        "utilization": est.mfu * est.step_time_s / total, "utilization_label": "MFU",
        "layout": f"dp{p.dp} tp{p.tp} pp{p.pp} ep{p.ep} {p.schedule} mb{c.training.micro_batch} "
                  f"zero{p.zero} recompute={p.recompute}",
        "device": peaks.name, "dtype": c.training.dtype, "peak_flops_s": peaks.flops_s,
        "peak_bytes_s": peaks.bytes_s, "onchip_bytes": peaks.onchip_bytes,
        "word_bytes": peaks.word_bytes, "memory_gib": est.memory_gib, "fits": est.fits,
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
                    "a training config YAML or a bundled example such as llama2-7b",
                    uses=frozenset({"measured"})))
