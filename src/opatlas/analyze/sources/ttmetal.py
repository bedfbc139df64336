"""Source kind ``ttmetal``: tt-metal's device-profiler CSV (``ops_perf_results_*.csv``), with
tt-perf-report's figures per op (opatlas.tenstorrent.ttmetal) and opatlas's bound beside them;
rows per device, totals per device and merged as tt-perf-report merges devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from opatlas.analyze.model import Analysis, Column, Source
from opatlas.analyze.sources import ReadOptions, SourceKind, register
from opatlas.analyze.why import FLAGS_COLUMN, OVERHEAD_HEADROOM, flags_of
from opatlas.errors import OpatlasError

KIND = "ttmetal"
L1_BYTES = {"wormhole": 1464 * 1024}  # MEM_L1_SIZE (tt-metal dev_mem_map.h); others 1.5 MiB
TOP_OPS = 10


def detect(path: Path) -> bool:
    """A tt-metal profiler CSV (``ops_perf_results*.csv``), gzipped too, as tt-perf-report
    reads it."""
    name = path.name.lower()
    if not path.is_file() or not name.endswith((".csv", ".csv.gz")):
        return False
    if name.startswith("ops_perf_results"):
        return True
    import gzip

    head = ""
    for opener in (gzip.open, open) if name.endswith(".gz") else (open,):
        try:
            with opener(path, "rt", errors="replace") as fh:
                head = fh.readline()
            break
        except (OSError, EOFError):  # not gzip after all (then read as it is), or cut short
            continue
    return head.startswith("OP CODE,") and "DEVICE KERNEL DURATION [ns]" in head


def read(path: Path, options: ReadOptions) -> Analysis:
    from opatlas.tenstorrent import ttmetal as tm

    x = options.extra
    window = tm.Window(x.get("start_signpost"), x.get("end_signpost"),
                       bool(x.get("ignore_signposts", False)), x.get("device") or x.get("arch"),
                       bool(x.get("tracing_mode", False)))  # --device names the chip
    rep = tm.load(path, window, strict=options.strict)
    tpr = tm.perf_report_module()
    rows = [_row(tpr, rep, op, dev) for dev, ops in rep.per_device.items() for op in ops
            if not tpr.is_signpost_op(op)]
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=_EMPTY)
    if len(frame):  # under our bound: flagged as every source's (api says them once)
        frame["flags"] = flags_of(frame.assign(headroom=pd.to_numeric(frame["headroom"],
                                                                      errors="coerce")))
    invalid = invalid_duration_note(path, frame, _durations(rep))
    if invalid and options.strict:
        raise OpatlasError(f"{invalid}; --strict refuses a profile with rows it cannot time")
    if rep.refusals and options.strict:  # cells it cannot use, a chip assumed
        raise OpatlasError(rep.refusals[0])
    summary = _summary(tpr, tm, rep, frame)
    said = [n for n in (invalid, unbounded_note(frame)) if n]
    summary["notes"] = [*summary["notes"], *said]
    return Analysis(Source(kind=KIND, path=str(path)), summary, frame, _columns(),
                    group_label="device")


_EMPTY = ["op", "pass", "calls", "time_s", "flops", "bytes", "bound_time_s", "limiter", "shape",
          "group", "device", "op_code", "device_time_ns", "bound", "invalid_duration"]


DURATION, GAP = "DEVICE KERNEL DURATION [ns]", "OP TO OP LATENCY [ns]"
SHOWN_DURATIONS = 8


def invalid_duration_note(path: Path, frame: pd.DataFrame,
                          durations: dict[int, str] | None = None) -> str | None:
    """Rows whose DEVICE KERNEL DURATION [ns] tt-perf-report rejects (missing, not a number,
    negative, or an op-to-op latency that contradicts it): they stay in the table with time 0
    and no device time, and count nothing in the totals — said, not silently left out, with
    each line's value where ``durations`` (CSV line -> the cell as said) gives it."""
    if frame.empty or "invalid_duration" not in frame:
        return None
    bad = frame[frame["invalid_duration"].fillna(False).astype(bool)]
    if bad.empty:
        return None
    durations = durations or {}
    ids = ", ".join(f"{i} ({durations[i]})" if i in durations else str(i)
                    for i in bad["id"].head(SHOWN_DURATIONS))
    ids += " ..." if len(bad) > SHOWN_DURATIONS else ""
    return (f"{path}: {len(bad)} row(s) have a missing or invalid {DURATION} "
            f"(CSV lines {ids}): their device time is left out of every total and they show "
            f"time 0 (as tt-perf-report omits them)")


def _durations(rep: Any) -> dict[int, str]:
    """CSV line -> its DEVICE KERNEL DURATION [ns] as written, and the OP TO OP LATENCY [ns]
    that contradicts it where the duration itself is a valid number, for the rows whose
    duration tt-perf-report rejects."""
    from tt_perf_report.csv_values import finite_float

    from opatlas.tenstorrent.ttmetal import RAW, cell_text

    out = {}
    for ops in rep.per_device.values():
        for op in ops:
            if not _v(op, "Invalid Device Duration"):
                continue
            raw = op[RAW]
            dur = raw.get(DURATION)
            text = cell_text(dur)
            number = finite_float(dur)
            if number is not None and number >= 0:  # valid alone: the latency contradicts it
                text += f", with {GAP} {cell_text(raw.get(GAP))}"
            out[int(_v(op, "ID"))] = text
    return out


def _v(op: dict[str, Any], key: str) -> Any:
    cell = op.get(key)
    return None if cell is None else cell.raw_value


def _row(tpr: Any, rep: Any, op: dict[str, Any], device: Any) -> dict[str, Any]:
    raw = op[tm_raw()]
    dev_us = _v(op, "Device Time")
    dev_ns = None if dev_us is None else dev_us * 1000.0
    gap_us = _v(op, "Op-to-Op Gap")
    bound_ns, source, flops, shape, bottleneck = _bound(tpr, rep, op, raw, dev_ns)
    traffic = None
    if not source:  # neither a matmul nor a conv: reshards too, by the DRAM side they move
        bound_ns, source, bottleneck, traffic = _traffic_bound(tpr, rep, raw, flops)
    sim_ns, sim_source = _sim_estimate(tpr, rep, raw)
    gemm = [shape[k] for k in ("batch", "M", "K", "N")] if "M" in shape else None
    row = {"op": str(_v(op, "OP Code")), "op_code": str(raw["OP CODE"]), "pass": "fwd",
           "calls": 1, "group": device, "device": device,
           "time_s": (dev_ns or 0.0) / 1e9, "device_time_ns": dev_ns,
           "gap_ns": None if gap_us is None else gap_us * 1000.0,
           "flops": flops, "bytes": _v(op, "DRAM Bytes"), "dram_traffic_bytes": traffic,
           "bound_time_s": None if bound_ns is None else bound_ns / 1e9,
           "opatlas_bound_ns": bound_ns, "bound_source": source,
           "headroom": (dev_ns / bound_ns) if dev_ns and bound_ns else None,
           "sim_estimate_ns": sim_ns, "sim_source": sim_source,
           "sim_err": abs(sim_ns - dev_ns) / dev_ns if sim_ns and dev_ns else None,
           "invalid_duration": bool(_v(op, "Invalid Device Duration")),
           "bound": _v(op, "Bound") or "", "cores": _v(op, "Cores"),
           "dram_gbs": _v(op, "DRAM"), "tflops": _v(op, "FLOPs"),
           "dram_util": _frac(_v(op, "DRAM %")), "flops_util": _frac(_v(op, "FLOPs %")),
           "util_compute": _frac(_v(op, "FLOPs %")),
           "achieved_flops_s": flops / (dev_ns / 1e9) if flops and dev_ns else None,
           "gemm": gemm,
           "math_fidelity": _v(op, "Math Fidelity"), "category": _v(op, "Op Category"),
           "input0_memory": _v(op, "Input 0 Memory"), "total_share": _frac(_v(op, "Total %")),
           "id": int(_v(op, "ID")), "global_call_count": _v(op, "Global Call Count"),
           "shape": shape}
    for col, key in _pm_columns().items():
        val = raw.get(col)
        row[key] = None if val is None or val != val else float(val)  # NaN != NaN
    row["limiter"] = _limiter(row["bound"], row["op_code"], source, bottleneck, row["headroom"])
    return row


def _sim_estimate(tpr: Any, rep: Any, raw: dict[str, Any]) -> tuple[float | None, str | None]:
    """(the calibrated Wormhole reshard simulator's time, "wormhole-sim") for a reshard-family
    row it models, (None, why it is not comparable) for the others of that family, and
    (None, None) for every other op. A prediction, not a lower bound: the row's bound is its
    DRAM traffic, as any other op's. The simulator is calibrated on Wormhole: a profile of
    another chip gets no prediction from it, and the row says why."""
    from opatlas.tenstorrent import ttmetal as tm

    if str(raw["OP CODE"]) not in tm.RESHARD_OPS:
        return None, None
    if not str(rep.arch).lower().startswith("wormhole"):
        return None, (f"not comparable: the simulator is calibrated on Wormhole, this profile "
                      f"is {rep.arch}'s")
    return tm.reshard_bound(raw, rep.csv_format, tpr)


def _frac(pct: float | None) -> float | None:
    """tt-perf-report's percent as the views' fraction."""
    return None if pct is None else pct / 100


def tm_raw() -> str:
    from opatlas.tenstorrent.ttmetal import RAW

    return RAW


def _pm_columns() -> dict[str, str]:
    from opatlas.tenstorrent.ttmetal import PM_COLUMNS

    return PM_COLUMNS


def _bound(tpr: Any, rep: Any, op: dict[str, Any], raw: pd.Series, dev_ns: float | None
           ) -> tuple[float | None, str, float | None, dict[str, Any], str | None]:
    """(bound ns, where it comes from, FLOPs, shape, bottleneck) of one row."""
    from opatlas.tenstorrent import ttmetal as tm

    code = str(raw["OP CODE"])
    shape = _input_shape(raw)
    if "Matmul" in code and "Sparse" not in code:
        dims = tm.matmul_dims(tpr, raw, rep.csv_format)
        cores = _v(op, "Cores")
        fid = raw.get("MATH FIDELITY")
        if dims is None or not cores or not isinstance(fid, str):
            return None, "not comparable: matmul shape, cores or fidelity missing", None, shape, None
        b, m, k, n = dims
        flops = 2.0 * b * m * k * n
        try:
            peak = rep.spec.tflops_per_core(fid) * 1e12 * cores
        except ValueError:
            return None, f"not comparable: math fidelity {fid}", flops, shape, None
        word = max(1, int(tpr.get_datatype_size(str(raw.get("INPUT_0_DATATYPE", "BFLOAT16")))))
        onchip = int(cores) * L1_BYTES.get(rep.spec.name, 1536 * 1024)
        secs, _traffic, neck = tm.orojenesis_bound(b, m, k, n, word, onchip, peak,
                                                   rep.spec.dram_bandwidth_gb_s * 1e9)
        return secs * 1e9, "orojenesis L1", flops, {"batch": b, "M": m, "K": k, "N": n}, neck
    if any(c in code for c in tm.CONV_OPS):
        return _conv_bound(tpr, rep, op, raw, shape)
    rate = _v(op, "FLOPs")  # TFLOP/s, where tt-perf-report counts an op's FLOPs
    flops = rate * 1e12 * dev_ns / 1e9 if rate and dev_ns else None
    return None, "", flops, shape, None  # bounded by its traffic (_traffic_bound), if known


def _traffic_bound(tpr: Any, rep: Any, raw: dict[str, Any], flops: float | None
                   ) -> tuple[float | None, str, str | None, int | None]:
    """(bound ns, what it counts, bottleneck, bytes) of an op that is neither a matmul nor a
    conv: its least DRAM traffic (tm.dram_traffic) at the DRAM bandwidth, and its FLOPs at the
    device's peak where tt-perf-report counts them; or (None, why it has no bound, None, None).
    A reshard-family op (interleaved to sharded and back) counts its DRAM side once; its L1
    side moves no DRAM traffic."""
    from opatlas.tenstorrent import ttmetal as tm

    traffic, why = tm.dram_traffic(raw, rep.csv_format, tpr)
    if traffic is None:
        return None, why, None, None
    gb_s = rep.spec.dram_bandwidth_gb_s
    memory_ns = traffic.bytes / gb_s  # B / (GB/s) = ns
    peak = rep.spec.tflops_per_core("LoFi") * 1e12 * rep.worker_cores
    compute_ns = flops / peak * 1e9 if flops else 0.0
    text = traffic.text(gb_s) + ("; FLOPs at the device's peak" if flops else "")
    return (max(memory_ns, compute_ns), text, "compute" if compute_ns > memory_ns else "memory",
            traffic.bytes)


def _conv_bound(tpr: Any, rep: Any, op: dict[str, Any], raw: pd.Series, shape: dict[str, Any]
                ) -> tuple[float | None, str, float | None, dict[str, Any], str | None]:
    """A conv's compute bound: its implicit GEMM's FLOPs at the peak of the cores it ran on
    at its math fidelity (tt-perf-report's FLOPs % is this bound over the device time). No
    memory term: tt-perf-report gives convs no DRAM bytes, and their activations may stay in
    L1, so the bound is the compute side only (said in "bound from")."""
    from opatlas.tenstorrent import ttmetal as tm

    gemm = tm.conv_gemm(tpr, raw, rep.csv_format)
    if gemm is None:
        return None, "not comparable: conv shape or window missing", None, shape, None
    m, k, n = gemm
    flops = 2.0 * m * k * n
    cores, fid = _v(op, "Cores"), raw.get("MATH FIDELITY")
    if not cores or not isinstance(fid, str):
        return None, "not comparable: conv cores or fidelity missing", flops, shape, None
    try:
        peak = rep.spec.tflops_per_core(fid) * 1e12 * cores
    except ValueError:
        return None, f"not comparable: math fidelity {fid}", flops, shape, None
    return flops / peak * 1e9, COMPUTE_ONLY, flops, shape, "compute"


COMPUTE_ONLY = "compute only: FLOPs / peak of its cores at its fidelity"


def _input_shape(raw: dict[str, Any]) -> dict[str, Any]:
    """Input 0's W, Z, Y, X as the row shows them (padded size; v2 cells read 'padded[logical]')
    — for display; the bounds read shapes with tt-perf-report's own readers."""
    out = {}
    for k in ("W", "Z", "Y", "X"):
        cell = raw.get(f"INPUT_0_{k}_PAD[LOGICAL]", raw.get(f"INPUT_0_{k}"))
        try:
            out[k] = int(float(str(cell).split("[")[0]))
        except ValueError:
            continue
    return out


def _limiter(bound: str, code: str, source: str, bottleneck: str | None,
             headroom: float | None) -> str:
    """tt-perf-report's Bound where it classes the op; else the side of opatlas's bound that
    binds, or "overhead" more than OVERHEAD_HEADROOM times over it (the other sources' rule);
    a reshard-family op without a bound because its tensors are all in L1 moves them between
    cores over the NoC: "communication" (no bound, as a PyBuda NoC pipe's verdict)."""
    from opatlas.tenstorrent import ttmetal as tm

    if bound == "HOST":
        return "overhead"
    if bound == "DRAM":
        return "memory"
    if bound in ("FLOP", "BOTH"):
        return "compute"
    if bottleneck:
        return "overhead" if headroom and headroom > OVERHEAD_HEADROOM else bottleneck
    if code in tm.RESHARD_OPS and source == tm.NO_BOUND_L1:
        return "communication"
    return "unknown"


def _summary(tpr: Any, tm: Any, rep: Any, frame: pd.DataFrame) -> dict[str, Any]:
    merged = tm.totals(tpr, rep.merged)
    per_device = {str(d): tm.totals(tpr, rows) for d, rows in rep.per_device.items()}
    l1 = L1_BYTES.get(rep.spec.name, 1536 * 1024)
    return {"title": f"tt-metal profile {rep.path.name}", "arch": rep.arch,
            "worker_cores": rep.worker_cores,
            "peak_flops_s": rep.spec.tflops_per_core("LoFi") * 1e12 * rep.worker_cores,
            "peak_bytes_s": rep.spec.dram_bandwidth_gb_s * 1e9,
            "onchip_bytes": l1 * rep.worker_cores, "word_bytes": 2,
            "csv_format": rep.csv_format.name, "window": rep.window,
            "signposts": len(rep.signposts), "devices": rep.devices,
            "tt_perf_report": tm.tt_perf_report_version(),
            "ops": len(frame),
            "device_time_s": merged["device_time_us"] / 1e6, "total_time_label": "device time",
            "op_to_op_gap_s": merged["op_to_op_gap_us"] / 1e6,
            "merged": merged, "per_device": per_device,
            "by_op_code": by_op_code(frame), "top_ops": top_ops(frame),
            "bounds": _bound_counts(frame), "notes": rep.notes}


def by_op_code(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Per op code: its ops, device time, gaps, mean FLOPs util and share of the device time
    (fractions, as every ratio in the rows and summary: 0.25 is 25 %)."""
    if frame.empty:
        return []
    g = frame.groupby("op_code", sort=False)
    out = pd.DataFrame({"ops": g.size(), "device_time_us": g["device_time_ns"].sum() / 1e3,
                        "op_to_op_gap_us": g["gap_ns"].sum() / 1e3,
                        "mean_flops_util": g["flops_util"].mean()})
    total = out["device_time_us"].sum()
    out["device_time_share"] = out["device_time_us"] / total if total else 0.0
    out = out.sort_values("device_time_us", ascending=False).reset_index()
    return out.astype(object).where(out.notna(), None).to_dict("records")


def top_ops(frame: pd.DataFrame, n: int = TOP_OPS) -> list[dict[str, Any]]:
    if frame.empty:
        return []
    top = frame.nlargest(n, "time_s")
    total = frame["time_s"].sum()
    return [{"op": r.op, "device": r.device, "id": r.id, "device_time_us": r.time_s * 1e6,
             "device_time_share": r.time_s / total if total else None, "bound": r.bound}
            for r in top.itertuples()]


def _bound_counts(frame: pd.DataFrame) -> dict[str, int]:
    if frame.empty:
        return {}
    src = frame["bound_source"].fillna("")
    return {"orojenesis": int((src == "orojenesis L1").sum()),
            "compute_only": int((src == COMPUTE_ONLY).sum()),
            "dram_traffic": int(src.str.startswith(TRAFFIC).sum()),
            "not_comparable": int(src.str.startswith("not comparable").sum()),
            "no_bound": int(src.str.startswith("no bound").sum()),
            "reshard_sim_estimates": int(frame["sim_estimate_ns"].notna().sum())}


TRAFFIC = "DRAM traffic"  # how tm.Traffic.text starts


def _reason_kind(source: str) -> str:
    """A row's reason for no bound without its particulars: "no bound: X (INPUT_1 ...)" ->
    "X"; every "not comparable: ..." -> "not comparable"."""
    if source.startswith("no bound: "):
        return source.removeprefix("no bound: ").split(" (")[0]
    return source.split(":")[0] or "no reason given"


def unbounded_note(frame: pd.DataFrame) -> str | None:
    """One note on the rows without an opatlas bound, counted by why (each row's "bound
    from" says its own reason)."""
    if frame.empty:
        return None
    src = frame["bound_source"].fillna("").astype(str)
    none = src[frame["opatlas_bound_ns"].isna()]
    if none.empty:
        return None
    why = none.map(_reason_kind)
    counts = ", ".join(f"{n} {w}" for w, n in why.value_counts().items())
    bounded = len(frame) - len(none)
    return (f"{len(none)} of {len(frame)} rows have no opatlas bound ({counts}); "
            f"{bounded} are bounded ({int(src.str.startswith(TRAFFIC).sum())} by their least "
            f"DRAM traffic: the DRAM tensors of the CSV's shape, layout, dtype and memory "
            f"columns read or written once); each row's \"bound from\" says which")


# how the rows and the summary give tt-perf-report's percents (the views show them as %)
FRACTION = "as a fraction in --json/--csv (0.4703 for its 47.03 %)"


def _columns() -> list[Column]:
    return [Column(key="id", label="ID", role="id", help="row of the CSV (as tt-perf-report)"),
            Column(key="device", label="device", role="group"),
            Column(key="bound", label="Bound (tt-perf-report)", help="tt-perf-report: DRAM / FLOP (>= 65% of "
                   "peak), BOTH, SLOW, HOST"),
            Column(key="op", label="OP Code", role="text"),
            Column(key="device_time_ns", label="Device Time", role="measured", unit="ns"),
            Column(key="gap_ns", label="Op-to-Op Gap", role="time", unit="ns"),
            Column(key="cores", label="Cores", role="count"),
            Column(key="dram_gbs", label="DRAM", role="rate", unit="GB/s"),
            Column(key="dram_util", label="DRAM %", role="util", unit="%",
                   help=f"tt-perf-report's DRAM % {FRACTION}"),
            Column(key="flops_util", label="FLOPs %", role="util", unit="%",
                   help=f"tt-perf-report's FLOPs % {FRACTION}"),
            Column(key="total_share", label="Total %", role="ratio", unit="%",
                   help="tt-perf-report's Total %: device time + op-to-op gap, over their sum "
                        f"over the device's ops in the window, {FRACTION}"),
            Column(key="math_fidelity", label="Math Fidelity"),
            Column(key="pm_ideal_ns", label="PM IDEAL", role="estimated", unit="ns",
                   help="tt-metal's own op model"),
            Column(key="pm_compute_ns", label="PM COMPUTE", role="estimated", unit="ns"),
            Column(key="pm_bandwidth_ns", label="PM BANDWIDTH", role="estimated", unit="ns"),
            Column(key="opatlas_bound_ns", label="opatlas bound", role="bound", unit="ns",
                   help="a lower bound: matmul: Orojenesis minimum DRAM traffic with the "
                        "cores' L1 as buffer and peak FLOP/s; conv: its FLOPs at the peak "
                        "of its cores (compute only); other ops, reshards too: their DRAM "
                        "tensors read or written once at the DRAM bandwidth (where every "
                        "tensor is known; an L1 tensor moves no DRAM traffic)"),
            Column(key="bound_source", label="bound from"),
            Column(key="headroom", label="headroom", role="ratio", unit="x",
                   help="device time / opatlas bound"),
            Column(key="sim_estimate_ns", label="sim estimate", role="estimated", unit="ns",
                   help="reshard (L1 sharded to L1 sharded): the calibrated Wormhole "
                        "simulator's prediction, an estimate, not a bound (the device may be "
                        "faster)"),
            Column(key="sim_err", label="sim err", role="error", unit="%",
                   help="|sim estimate - device time| / device time"),
            Column(key="sim_source", label="sim estimate from",
                   help="reshards: wormhole-sim, or why the simulator does not model the op"),
            Column(key="category", label="category"),
            Column(key="pass", label="pass", role="id"),
            Column(key="time_s", label="time", role="measured", unit="s",
                   help="device kernel time (tt-perf-report's Device Time)"),
            Column(key="bound_time_s", label="bound time", role="bound", unit="s",
                   help="opatlas bound, in seconds"),
            Column(key="limiter", label="limiter"),
            FLAGS_COLUMN,
            Column(key="flops", label="FLOPs", role="count", unit="FLOP"),
            Column(key="bytes", label="DRAM bytes", role="count", unit="B",
                   help="tt-perf-report's (matmuls)"),
            Column(key="dram_traffic_bytes", label="least DRAM bytes", role="count", unit="B",
                   help="opatlas: the row's DRAM tensors read or written once (TILE layout "
                        "in whole 32x32 tiles, bfloat8_b 1088 B a tile): the traffic its "
                        "bound counts"),
            Column(key="achieved_flops_s", label="FLOP/s", role="rate", unit="FLOP/s"),
            Column(key="util_compute", label="util (weighting)", role="util", unit="%"),
            Column(key="gemm", label="gemm", role="shape")]


register(SourceKind(KIND, detect, read, "a tt-metal device-profiler CSV (ops_perf_results_*.csv)",
                    uses=frozenset({"start_signpost", "end_signpost", "ignore_signposts",
                                    "device"})))
