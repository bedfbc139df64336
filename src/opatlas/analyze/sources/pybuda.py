"""Source kind ``pybuda``: a PyBuda run folder or netlist, as PyBuda's perf analyzer shows it
(per epoch and per op: estimate, measured kernel, bandwidth-bound time, which pipe limits).
Without the backend's perf results, the netlist's own estimate (op model, limiter cycles,
reblocking). The reading is in opatlas.tenstorrent; this module builds the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from opatlas.analyze.model import Analysis, Column, Source
from opatlas.analyze.sources import ReadOptions, SourceKind, register
from opatlas.analyze.why import BELOW_BOUND, OVERHEAD_HEADROOM
from opatlas.devices import FIDELITY_PHASES, tensix_flop_per_cycle
from opatlas.errors import OpatlasError

KIND = "pybuda"
WH_L1_BYTES = 1464 * 1024  # a Wormhole core's L1 (MEM_L1_SIZE)


def detect(path: Path) -> bool:
    if path.is_dir():
        return (any(path.glob("*netlist.yaml")) or any(path.glob("tt_build/test_out/*netlist.yaml"))
                or (path / "perf_results" / "analyzer_results").is_dir())
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    if path.name.endswith(("netlist.yaml", "netlist.yml")):
        return True
    with open(path, errors="replace") as fh:
        head = fh.read(16384)
    keys = {line.split(":")[0] for line in head.splitlines() if line[:1].isalpha()}
    return {"devices", "queues"} <= keys


def read(path: Path, options: ReadOptions) -> Analysis:
    from opatlas.tenstorrent.pybuda_run import find_netlist, has_perf_results

    extra = options.extra
    netlist = Path(extra["netlist"]) if extra.get("netlist") else None
    folder = Path(extra["dir"]) if extra.get("dir") else None
    for option, given in (("--netlist", netlist), ("--dir", folder)):
        if given is not None and not given.exists():
            raise OpatlasError(f"{option} {given}: no such file or folder")
    if path.is_dir():
        folder = folder or path
        netlist = netlist or find_netlist(path)
    elif path.exists():
        netlist = netlist or path
        folder = folder or path.parent
    else:
        raise OpatlasError(f"{path}: no such file or folder")
    assert netlist is not None and folder is not None
    spatial = bool(extra.get("spatial_epochs", False))
    if has_perf_results(folder):
        return measured_analysis(netlist, folder, spatial, strict=options.strict)
    missing = (f"{folder} has no perf_results/analyzer_results (the backend perf analyzer's "
               f"output)")
    if options.strict:
        raise OpatlasError(f"{missing}; --strict asks for measured results and refuses to show "
                           f"the netlist's own estimate instead (give --dir a run folder with "
                           f"perf_results/, or leave out --strict)")
    msg = f"{missing}: showing the netlist's own estimate (op model and bandwidth limits)"
    a = estimate_analysis(netlist, spatial, strict=options.strict)
    a.summary["notes"] = [msg, *a.summary["notes"]]  # the CLI says notes on stderr
    return a


# ---------------------------------------------------------------- measured (a run folder)

def _mukt(op: Any) -> str:
    return f"{op.m_k}/{op.u_kt}" if op.u_kt is not None else ""


def _mukt_flag(op: Any) -> str:
    if op.u_kt is None:
        return ""
    if op.m_k == 1:
        return "good m_k/u_kt"
    if (op.u_kt < 4 and op.m_k >= 4) or (op.u_kt == 1 and op.m_k > 1):
        return "bad m_k/u_kt"
    return ""


def _err(est: float | None, actual: float) -> float | None:
    """|estimate - measured| / measured, as a fraction (the views' error role)."""
    if est is None or actual <= 0:
        return None
    return abs(est - actual) / actual


def gemm_dims(op: Any) -> list[int] | None:
    """[t, M, K, N] of a dense matmul (tiles of 32x32), else None."""
    if not op.is_dense_matmul:
        return None
    return [op.t, op.grid[0] * op.mblock[0] * op.ublock[0] * 32, op.m_k * op.u_kt * 32,
            op.grid[1] * op.mblock[1] * op.ublock[1] * 32]


def matmul_flops(op: Any) -> float:
    """2·M·K·N·t per input for a dense matmul."""
    g = gemm_dims(op)
    return 0.0 if g is None else 2.0 * g[0] * g[1] * g[2] * g[3]


def theoretical_cycles(op: Any, arch: str) -> int | None:
    """A dense matmul's math-bound cycles per input (PyBuda's theoretical cycles: its tile
    products at the Tensix FPU's rate over its fidelity's phases), else None: an op without
    a math model (element-wise, sparse) has no compute floor. Both modes' bound takes it, a
    measured run's too: the kernel's own measured time is no bound on itself."""
    from opatlas.tenstorrent.opmodel import theoretical_matmul

    return theoretical_matmul(op, arch) if op.is_dense_matmul else None


def bound_s(floor_s: float | None, traffic: Any) -> float | None:
    """The roofline bound: the larger of the compute floor (:func:`theoretical_cycles`) and
    the least time of the op's DRAM traffic at the chip's DRAM peak; None where neither
    applies."""
    return max(floor_s or 0.0, traffic.dram / traffic.dram_bytes_s) or None


def _limiter(problem: str, op: Any) -> str:
    if not problem:
        return "compute"
    if problem.startswith("noc"):
        return "communication"
    if problem == "output" and not op.output_is_dram:
        return "communication"
    return "memory"


def _shape(op: Any) -> dict[str, Any]:
    s = {"grid": list(op.grid), "t": op.t, "mblock": list(op.mblock), "ublock": list(op.ublock)}
    if op.u_kt is not None:
        s.update(m_k=op.m_k, u_kt=op.u_kt)
    return s


def _common(op: Any, epoch: int, traffic: Any) -> dict[str, Any]:
    """The columns both modes share; ``bytes`` (the roofline's memory term) is DRAM traffic
    only: what an op receives over the NoC from its epoch stays on chip (``noc_bytes``)."""
    return {"op": op.name, "pass": op.pass_, "calls": 1, "group": epoch, "epoch": epoch,
            "type": op.type, "graph": op.graph, "grid": f"{op.grid[0]}x{op.grid[1]}",
            "cores": op.cores, "tiles": op.tiles_per_core * op.cores,
            "mb": f"{op.mblock[0]},{op.mblock[1]}",
            "ub": f"{op.ublock[0]},{op.ublock[1]}", "t": op.t, "m/u_kt": _mukt(op),
            "flops": matmul_flops(op), "bytes": traffic.dram, "noc_bytes": traffic.noc,
            "pcie_bytes": traffic.pcie, "shape": _shape(op),
            "gemm": gemm_dims(op)}


def _measured_row(rec: dict[str, Any], nl: Any, n_in: int, traffic: Any) -> dict[str, Any]:
    op, clock = rec["op"], nl.clock_hz
    flags = [f for f in [_mukt_flag(op)] if f]
    theoretical = theoretical_cycles(op, nl.arch)
    floor = theoretical / clock if theoretical else None
    row = {**_common(op, rec["epoch"], traffic),
           "time_s": rec["bw_kernel_cycles"] / clock,
           "theoretical_cycles": theoretical,
           "bound_time_s": bound_s(floor, traffic),
           "limiter": _limiter(rec["bw_problem"], op),
           "estimated_cycles": rec["estimated_cycles"], "kernel_cycles": rec["kernel_cycles"],
           "util": rec["util"] / 100, "estimated_lim_cycles": rec["estimated_lim_cycles"],
           "bw_kernel_cycles": rec["bw_kernel_cycles"], "bw_util": rec["bw_util"] / 100,
           "util_compute": rec["bw_util"] / 100, "bw_problem": rec["bw_problem"],
           "est_err": _err(rec["estimated_cycles"], rec["kernel_cycles"]),
           "est_lim_err": _err(rec["estimated_lim_cycles"], rec["bw_kernel_cycles"]),
           "out_req": rec["output_bw"]["required"], "out_bw": rec["output_bw"]["actual"]}
    if rec["output_bw"]["actual"] < rec["output_bw"]["required"]:
        flags.append("out below required")
    for i in range(n_in):
        b = rec["input_bws"][i] if i < len(rec["input_bws"]) else None
        row[f"in{i}_req"] = b["required"] if b else None
        row[f"in{i}_bw"] = b["actual"] if b else None
        if b and b["actual"] < b["required"]:
            flags.append(f"in{i} below required")
    row["flags"] = ", ".join(flags)
    return _rates(row, "measured", floor)


def _rates(row: dict[str, Any], what: str, floor: float | None) -> dict[str, Any]:
    """FLOP/s and headroom; a time under the bound (the data contradicts the bound) is
    flagged, never shown as if it were fine. ``floor``: the compute term of the bound (s),
    None where the op has none: the limiter names the term that is there."""
    t, b = row["time_s"], row["bound_time_s"]
    row["achieved_flops_s"] = row["flops"] / t if t and row["flops"] else None
    row["achieved_bytes_s"] = row["bytes"] / t if t and row["bytes"] else None
    row["headroom"] = t / b if t and b else None
    if row["headroom"] is not None and row["headroom"] < 1 - 1e-9:
        flag = f"{BELOW_BOUND}: {what} time is {row['headroom']:.2f}x the bound"
        row["flags"] = ", ".join(f for f in (row.get("flags"), flag) if f)
    row["limiter"] = kernel_verdict(row["limiter"], b, row["headroom"], floor)
    return row


def kernel_verdict(limiter: str, bound: float | None, headroom: float | None,
                   floor: float | None = None) -> str:
    """The limiter in the other sources' words (analyze.why.explain's rule). Where no pipe is
    below what the op needs (``limiter`` "compute": the kernel itself is the limit), the
    verdict is the bound's: "compute" only where the compute floor (``floor``, s: a dense
    matmul's math-bound time) is the bound's larger term, "memory" where the DRAM traffic is
    (an element-wise op has no FLOP count, hence no compute floor: its only bound is its DRAM
    bytes), "unknown" without a bound, and "overhead" more than OVERHEAD_HEADROOM times over
    it. A pipe's verdict (memory, communication) is the analyzer's or the op model's
    measured or modelled pipe and stands: the NoC is in no bound, and a DRAM pipe runs at
    the balancer's share of the chip's bandwidth, not at the peak the bound assumes."""
    if limiter != "compute":
        return limiter
    if not bound:
        return "unknown"
    if headroom is not None and headroom > OVERHEAD_HEADROOM:
        return "overhead"
    return "compute" if floor and floor >= bound * (1 - 1e-9) else "memory"


def below_bound_note(rows: pd.DataFrame, what: str, arch: str) -> list[str]:
    """A note naming the rows whose time is under their bound (flagged in the table)."""
    if "flags" not in rows:
        return []
    low = rows[rows["flags"].fillna("").str.contains(BELOW_BOUND, regex=False)]
    if low.empty:
        return []
    from opatlas.tenstorrent.pybuda_estimate import dram_peak_bytes_s

    names = ", ".join(low["op"].head(5)) + (" ..." if len(low) > 5 else "")
    return [f"{len(low)} op(s) have a {what} time below their bound (DRAM bytes at "
            f"{dram_peak_bytes_s(arch) / 1e9:.0f} GB/s, or the compute floor): {names}; flagged "
            f"'{BELOW_BOUND}' — the data contradict the bound, check them"]


def _cols_measured(has_est: bool, n_in: int) -> list[Column]:
    cols = [Column(key="op", label="name", role="id"),
            Column(key="epoch", label="epoch", role="group"),
            Column(key="grid", label="grid"), Column(key="mb", label="mb"),
            Column(key="ub", label="ub"), Column(key="t", label="t", role="count"),
            Column(key="m/u_kt", label="m/u_kt",
                   help="green when m_k = 1; red when (u_kt < 4 and m_k >= 4) or "
                        "(u_kt = 1 and m_k > 1)")]
    if has_est:
        cols.append(Column(key="estimated_cycles", label="est", role="estimated", unit="cycles",
                           help="the cycles PyBuda's balancer was given (op_perf.csv)"))
    cols += [Column(key="kernel_cycles", label="kernel", role="measured", unit="cycles",
                    help="measured kernel time per input with infinite input/output "
                         "bandwidth"),
             THEORETICAL_COLUMN,
             Column(key="util", label="util", role="util", unit="%",
                    help="math utilization of the kernel time (infinite bandwidth); that of "
                         "the time shown, bw_kernel, is bw_util")]
    if has_est:
        cols.append(Column(key="estimated_lim_cycles", label="est_lim", role="estimated",
                           unit="cycles", help="the balancer's limiter cycles"))
    cols += [Column(key="bw_kernel_cycles", label="bw_kernel", role="measured", unit="cycles",
                    help="measured time per input with the real pipes: the 'real' time"),
             Column(key="bw_util", label="bw_util", role="util", unit="%"),
             Column(key="bw_problem", label="bw problem",
                    help="the pipe furthest below its required bandwidth: noc in<i> "
                         "(from an op of this epoch), dram in<i>, or output")]
    if has_est:
        cols += [Column(key="est_err", label="est err", role="error", unit="%",
                        help="|est - kernel| / kernel"),
                 Column(key="est_lim_err", label="est_lim err", role="error", unit="%",
                        help="|est_lim - bw_kernel| / bw_kernel")]
    cols += [Column(key="out_req", label="out_req", role="rate", unit="B/cycle"),
             Column(key="out_bw", label="out_bw", role="rate", unit="B/cycle")]
    for i in range(n_in):
        cols += [Column(key=f"in{i}_req", label=f"in{i}_req", role="rate", unit="B/cycle"),
                 Column(key=f"in{i}_bw", label=f"in{i}_bw", role="rate", unit="B/cycle")]
    cols.append(Column(key="max_fan_in", label="fan-in", role="count",
                       help="most producer cores one core of this op gathers an input from"))
    cols.append(Column(key="flags", label="flags",
                       help="highlights of PyBuda's perf analyzer: bad/good m_k/u_kt, a pipe "
                            "below its required bandwidth; and a time below its bound"))
    return cols + _common_cols("measured", BOUND_HELP)


THEORETICAL_COLUMN = Column(
    key="theoretical_cycles", label="theoretical", role="bound", unit="cycles",
    help="matmul: t·m_k·mblock·u_kt·ublock tile products x the fidelity's phases x cycles per "
         "tile and phase (Wormhole 16, Grayskull 32): the math bound")
BOUND_HELP = "max(matmul: the theoretical (math-bound) cycles, DRAM bytes / DRAM peak)"
LIMITER_HELP = ("memory: a DRAM (or PCIe output) pipe below what the op needs, or no pipe "
                "short and its DRAM traffic the bound's larger term; communication: a NoC pipe "
                "from an op of its epoch; compute: no pipe short and the matmul's math floor "
                f"the bound's larger term; overhead: no pipe short, over {OVERHEAD_HEADROOM:g}x "
                "its bound; unknown: no pipe short and no bound")


def _common_cols(time_role: str, bound_help: str) -> list[Column]:
    """The contract's columns, for the plain table and the roofline."""
    return [Column(key="pass", label="pass", role="id"),
            Column(key="time_s", label="time", role=time_role, unit="s",
                   help="cycles per input / clock"),
            Column(key="bound_time_s", label="bound", role="bound", unit="s", help=bound_help),
            Column(key="headroom", label="headroom", role="ratio", unit="x"),
            Column(key="limiter", label="limiter", help=LIMITER_HELP),
            Column(key="flops", label="FLOPs", role="count", unit="FLOP"),
            Column(key="bytes", label="DRAM bytes", role="count", unit="B",
                   help="per input: one entry of each non-prologue DRAM queue read and each "
                        "DRAM queue written (the roofline's memory term, at the DRAM peak)"),
            Column(key="noc_bytes", label="NoC bytes", role="count", unit="B",
                   help="per input: what the op's cores receive over the NoC from ops of its "
                        "epoch (on chip, L1 to L1; not in the bound)"),
            Column(key="pcie_bytes", label="PCIe bytes", role="count", unit="B",
                   help="per input: host queues read or written (not in the bound)"),
            Column(key="achieved_flops_s", label="FLOP/s", role="rate", unit="FLOP/s"),
            Column(key="achieved_bytes_s", label="DRAM B/s", role="rate", unit="B/s"),
            Column(key="util_compute", label="util (weighting)", role="util", unit="%"),
            Column(key="gemm", label="gemm [t, M, K, N]", role="shape")]


def measured_analysis(netlist: Path, folder: Path, spatial: bool = False,
                      strict: bool = False) -> Analysis:
    """A run folder's analysis; ``strict``: what would only be a note of doubt (an op without
    a measured row, a utilization out of range, an assumed fidelity) is refused instead."""
    from opatlas.tenstorrent.pybuda_estimate import epochs_of, reblocking
    from opatlas.tenstorrent.pybuda_run import load_run

    run = load_run(netlist, folder, spatial)
    doubts = [*run.notes, *_unstated_fidelity_note(run.netlist, measured=True)]
    _refuse(doubts, strict)
    clock = run.netlist.clock_hz
    n_in = min(8, max(len(r["input_bws"]) for ops in run.epochs for r in ops))
    epochs = epochs_of(run.netlist, spatial)
    edges = [e for i, ops in enumerate(epochs) for e in reblocking(i, ops)]
    fan = _max_fan_in(edges)
    rows = pd.DataFrame([{**_measured_row(r, run.netlist, n_in,
                                          _traffic(run.netlist, epochs, r["op"], spatial)),
                          "max_fan_in": fan.get(r["name"])}
                         for ops in run.epochs for r in ops])
    ms = run.model_summary
    epoch_summary = epoch_limiters(run.epoch_summary, rows)
    # the kernel estimation error is said once, as the views' estimation error: a fraction,
    # labelled absolute (Σ|est - kernel| / Σ kernel has no sign); PyBuda's percent copy of it
    # (kernel_estimation_error) would be a second card of the same figure
    summary = {**_summary_head(run.netlist, spatial), "mode": "measured",
               "title": f"PyBuda run {folder}", "throughput": ms["overall_speed"],
               "utilization": ms["overall_util"] / 100,
               "utilization_label": "approx. math utilization",
               "estimation_error": (None if ms["kernel_estimation_error"] is None
                                    else ms["kernel_estimation_error"] / 100),
               "estimation_error_label": KERNEL_ERROR_LABEL,
               **{k: v for k, v in ms.items() if k != "kernel_estimation_error"},
               "time_per_input_s": run.model_summary["pipeline_cycles"] / clock,
               **_epoch_times(epoch_summary, clock, "math_util"),
               "group_util_label": list(GROUP_UTIL["math_util"]),
               "epoch_summary": epoch_summary, "files": run.files,
               "reblocking": [e for e in edges if e["reblock"]],
               "reblocking_edges": sum(1 for e in edges if e["reblock"]),
               "slowest_op_rule": "largest bw_bound_single_runtime (PyBuda's analyzer keys "
                                  "max() on a display name and takes the first op)",
               "percent_keys": MEASURED_PERCENTS,
               "notes": [*doubts, *_missing_files_note(run.files, folder),
                         *below_bound_note(rows, "measured", run.netlist.arch)]}
    return Analysis(Source(kind=KIND, path=str(folder)), summary, rows,
                    _cols_measured(run.has_estimates, n_in), group_label="epoch")


# PyBuda's own figures, kept as its perf analyzer prints them: percents (2.22 is 2.22 %),
# where the views' ratios (utilization, estimation_error, group_util) are fractions;
# ``percent_keys`` names them ("table.column" for a summary table's column) for every view
MEASURED_PERCENTS = ["overall_util", "kernel_bw_estimation_error", "epoch_summary.math_util",
                     "epoch_summary.balancer_util"]
ESTIMATE_PERCENTS = ["epoch_summary.balancer_util"]
KERNEL_ERROR_LABEL = "mean |kernel estimate error|"  # Σ|est - kernel| / Σ kernel: no sign
# an epoch's util, by mode: (label, what it is), the summary's ``group_util_label``. The two
# are different figures and never carry the same name: a measured run's is a math utilization,
# the netlist alone's the balancer's core-weighted share of the pipeline (no math in it)
GROUP_UTIL = {
    "math_util": ("math util", "PyBuda's perf analyzer's epoch util: each op's measured "
                               "bw_util weighted by its cores and bw_kernel cycles, over the "
                               "pipeline cycles and the cores"),
    "balancer_util": ("balancer util", "PyBuda's balancer util: each op's op-model cycles "
                                       "weighted by its cores, over the pipeline (the slowest "
                                       "op's limiter cycles) and the cores; a busy share, "
                                       "with no math utilization in it"),
}


def _refuse(doubts: list[str], strict: bool) -> None:
    """Under --strict, the first note of doubt is an error (how many more there are said)."""
    if strict and doubts:
        more = f" (and {len(doubts) - 1} more such note(s))" if len(doubts) > 1 else ""
        raise OpatlasError(f"{doubts[0]}{more}; --strict refuses what it would otherwise "
                           f"only note (leave out --strict to analyse it as a note)")


def _missing_files_note(files: dict[str, str], folder: Path) -> list[str]:
    """PyBuda's optional files (PYBUDA_OP_PERF=1) that the run folder lacks, and what is
    then unknown: said, never left as silently empty columns."""
    notes = []
    if "op_perf.csv" not in files:
        notes.append(f"{folder} has no op_perf.csv: PyBuda's estimates (est, est_lim), their "
                     f"errors, the kernel estimation error and the balancer util are unknown")
    if "balancer_score.csv" not in files:
        notes.append(f"{folder} has no balancer_score.csv: the balancer's scores are unknown "
                     f"(shown as '-')")
    return notes


def _traffic(nl: Any, epochs: list[dict[str, Any]], op: Any, spatial: bool) -> Any:
    """The op's bytes per input by pipe, its epoch's ops being the on-chip producers."""
    from opatlas.tenstorrent.pybuda_estimate import traffic
    from opatlas.tenstorrent.pybuda_run import epoch_key

    return traffic(op, nl, epochs[epoch_key(op, spatial)])


def _max_fan_in(edges: list[dict[str, Any]]) -> dict[str, int]:
    fan: dict[str, int] = {}
    for e in edges:
        if e["fan_in"] is not None:
            fan[e["consumer"]] = max(fan.get(e["consumer"], 0), e["fan_in"])
    return fan


def _epoch_times(epochs: list[dict[str, Any]], clock: float, util: str) -> dict[str, Any]:
    """An epoch's ops run at once, as a pipeline: per input it takes its slowest op's
    cycles, and the model the sum of its epochs'. The total, each epoch's time and its
    utilization (PyBuda's, the epoch summary's column ``util`` names: a measured run's
    math_util, the netlist alone's balancer_util, :data:`GROUP_UTIL`) as the views take them."""
    return {"total_time_s": sum(e["pipeline_cycles"] for e in epochs) / clock,
            "total_time_label": "time per input (each epoch's slowest op, summed)",
            "group_times_s": {str(e["epoch"]): e["pipeline_cycles"] / clock for e in epochs},
            "group_util": {str(e["epoch"]): (None if e.get(util) is None else e[util] / 100)
                           for e in epochs}}


def epoch_limiters(epochs: list[dict[str, Any]], rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The epochs with their limiter: an epoch's limiter is its slowest row's. Its ops run at
    once, as a pipeline, and per input it takes its slowest op's time (``slowest_op``), so
    what limits that op limits the epoch; taking the row's verdict keeps the rows' words and
    rule (:func:`kernel_verdict`: no "compute" without a bound). An epoch without a slowest
    op (none modelled) is "unknown". ``bw_problem`` is that op's too."""
    verdicts = dict(zip(zip(rows["epoch"], rows["op"], strict=True),
                        zip(rows["limiter"], rows["bw_problem"], strict=True), strict=True))
    out = []
    for e in epochs:
        limiter, problem = verdicts.get((e["epoch"], e.get("slowest_op")), ("unknown", ""))
        rest = {k: v for k, v in e.items() if k not in ("epoch", "slowest_op", "limiter",
                                                         "bw_problem")}
        out.append({"epoch": e["epoch"], "slowest_op": e.get("slowest_op"), "limiter": limiter,
                    "bw_problem": problem or "", **rest})
    return out


def peak_fidelity(nl: Any) -> str:
    """The math fidelity of the analysis's compute peak: the fastest that a dense matmul of
    the netlist runs at (the roofline's roof: no op above it); LoFi, the FPU's fastest, where
    a dense matmul states none or there is none."""
    stated = {op.math_fidelity for op in nl.all_ops() if op.is_dense_matmul}
    if not stated or None in stated:
        return "LoFi"
    return min(stated, key=FIDELITY_PHASES.__getitem__)


def _peak_compute(nl: Any) -> dict[str, Any]:
    """The chip's (chips') compute peak at :func:`peak_fidelity`, from the one Tensix rate
    (:func:`opatlas.devices.tensix_flop_per_cycle`) the op model's theoretical cycles and the
    device catalog take too, and how it was derived."""
    fid = peak_fidelity(nl)
    lofi, phases = tensix_flop_per_cycle(nl.arch), FIDELITY_PHASES[fid]
    cores = nl.core_count * nl.device_count
    rate = f"{lofi:g}" + (f"/{phases}" if phases > 1 else "")
    return {"peak_flops_s": lofi / phases * cores * nl.clock_hz,
            "peak_compute_basis": f"{cores} cores x {rate} FLOP/cycle ({fid}) x "
                                  f"{nl.clock_hz / 1e9:g} GHz"}


def _unstated_fidelity_note(nl: Any, measured: bool = False) -> list[str]:
    """The dense matmuls that state no math_fidelity, named, and what each figure assumes
    for them: the bound and the compute peak LoFi in both modes (the FPU's fastest: a bound
    that holds whatever fidelity the op ran at); the netlist alone's op model (est) HiFi4, the
    slowest, which a measured run has no use for (its est is PyBuda's op_perf.csv). A note of
    doubt: --strict refuses it (:func:`_refuse`)."""
    from opatlas.tenstorrent.opmodel import BOUND_FIDELITY, MODEL_FIDELITY

    names = [op.name for op in nl.all_ops() if op.is_dense_matmul and op.math_fidelity is None]
    if not names:
        return []
    shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
    model = ("" if measured else
             f"; their op-model estimate (est, est_lim) takes {MODEL_FIDELITY}, the slowest: "
             f"an estimate assumes the most phases, a bound the fewest, so the two differ on "
             f"purpose")
    return [f"{len(names)} matmul(s) of {nl.path} state no math_fidelity ({shown}): their "
            f"theoretical cycles (the bound) and the compute peak take {BOUND_FIDELITY}, the "
            f"FPU's fastest, a bound whatever fidelity they ran at{model}"]


def _summary_head(nl: Any, spatial: bool) -> dict[str, Any]:
    from opatlas.tenstorrent.pybuda_estimate import dram_peak_bytes_s

    return {"netlist": str(nl.path), "arch": nl.arch, "clock_hz": nl.clock_hz,
            "throughput_unit": "samples/s", **_peak_compute(nl),
            "peak_bytes_s": dram_peak_bytes_s(nl.arch),
            "core_count": nl.core_count, "device_count": nl.device_count,
            "epochs": (len(nl.graphs) if spatial else max(nl.temporal) + 1),
            "epoch_kind": "spatial" if spatial else "temporal", "ops": len(nl.all_ops()),
            "word_bytes": 2, "onchip_bytes": WH_L1_BYTES * nl.core_count * nl.device_count}


# ---------------------------------------------------------------- the netlist alone

def _estimate_row(op: Any, est: Any, epoch: int, clock: float, fan_in: int | None,
                  traffic: Any) -> dict[str, Any]:
    lim = est.limiter_cycles
    kind = est.limiter
    limiter = ("unknown" if lim is None else "compute" if kind == "compute"
               else "communication" if kind.startswith("noc") else "memory")
    theoretical = est.theoretical / clock if est.theoretical else None
    return _rates({**_common(op, epoch, traffic),
            "time_s": (lim or 0) / clock,
            "bound_time_s": bound_s(theoretical, traffic),
            "limiter": limiter, "estimated_cycles": est.cycles,
            "theoretical_cycles": est.theoretical, "estimated_lim_cycles": lim,
            "bw_problem": "" if kind in ("compute", "unknown") else kind, "max_fan_in": fan_in,
            "op_model": est.model, "util_compute": None, "flags": ""}, "estimated", theoretical)


def _cols_estimate() -> list[Column]:
    return [Column(key="op", label="name", role="id"),
            Column(key="epoch", label="epoch", role="group"),
            Column(key="type", label="type"), Column(key="grid", label="grid"),
            Column(key="mb", label="mb"), Column(key="ub", label="ub"),
            Column(key="t", label="t", role="count"), Column(key="m/u_kt", label="m/u_kt"),
            Column(key="tiles", label="tiles", role="count", help="output tiles per input"),
            Column(key="estimated_cycles", label="est", role="estimated", unit="cycles",
                   help="the backend op model's kernel cycles per input"),
            THEORETICAL_COLUMN,
            Column(key="estimated_lim_cycles", label="est_lim", role="estimated",
                   unit="cycles", help="max(kernel, input reads, output write) at the "
                                       "balancer's DRAM / NoC / PCIe bandwidths"),
            Column(key="bw_problem", label="limited by"),
            Column(key="max_fan_in", label="fan-in", role="count",
                   help="most producer cores one core of this op gathers an input from"),
            Column(key="op_model", label="op model"),
            Column(key="flags", label="flags", help="a time below its bound"),
            *_common_cols("estimated", BOUND_HELP)]


def estimate_analysis(netlist: Path, spatial: bool = False, strict: bool = False) -> Analysis:
    """The netlist alone's analysis; ``strict``: an assumed fidelity is refused, not noted."""
    from opatlas.tenstorrent.netlist import load_netlist
    from opatlas.tenstorrent.opmodel import matmul_check
    from opatlas.tenstorrent.pybuda_estimate import epochs_of, estimate_netlist

    nl = load_netlist(netlist)
    doubts = _unstated_fidelity_note(nl)
    _refuse(doubts, strict)
    result = estimate_netlist(nl, spatial)
    fan = _max_fan_in(result.reblocking)
    epochs = epochs_of(nl, spatial)
    rows = pd.DataFrame([_estimate_row(op, est, (op.spatial_epoch if spatial
                                                 else op.temporal_epoch), nl.clock_hz,
                                       fan.get(op.name), _traffic(nl, epochs, op, spatial))
                         for op, est in result.ops])
    check = matmul_check()
    unmodelled = result.model_summary["unmodelled_ops"]
    notes = [f"{unmodelled} op(s) of {netlist} have no op model (sparse matmuls: the netlist "
             f"lacks their non-zero tile counts): they count 0 cycles in the estimate"
             ] if unmodelled else []
    defaulted = sorted({op.type for op, est in result.ops if "no fitted model" in est.model})
    if defaulted:
        count = sum(1 for _, est in result.ops if "no fitted model" in est.model)
        notes.append(f"{count} op(s) of type {', '.join(defaulted)} have no fitted op model: "
                     f"estimated with the nop parameters (the backend's default path), see "
                     f"the op model column")
    notes = [*doubts, *notes, *below_bound_note(rows, "estimated", nl.arch)]
    epoch_summary = epoch_limiters(result.epoch_summary, rows)
    summary = {**_summary_head(nl, spatial), "mode": "estimate",
               "title": f"PyBuda netlist {netlist.name} (estimate)",
               "throughput": result.model_summary["overall_speed"],
               **result.model_summary,
               "time_per_input_s": result.model_summary["pipeline_cycles"] / nl.clock_hz,
               **_epoch_times(epoch_summary, nl.clock_hz, "balancer_util"),
               "group_util_label": list(GROUP_UTIL["balancer_util"]),
               "epoch_summary": epoch_summary,
               "reblocking": [e for e in result.reblocking if e["reblock"]],
               "edges": len(result.reblocking),
               "opmodel_check": check,
               "opmodel_matmul_mean_error_pct": check["mean_abs_error_pct"],
               "reblocking_edges": sum(1 for e in result.reblocking if e["reblock"]),
               "percent_keys": ESTIMATE_PERCENTS, "notes": notes}
    return Analysis(Source(kind=KIND, path=str(netlist)), summary, rows, _cols_estimate(),
                    group_label="epoch")


register(SourceKind(KIND, detect, read,
                    "a PyBuda run folder or netlist (*netlist.yaml; perf_results/, "
                    "op_perf.csv, balancer_score.csv)",
                    uses=frozenset({"netlist", "dir", "spatial_epochs"})))
