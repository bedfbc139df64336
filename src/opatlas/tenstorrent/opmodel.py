"""PyBuda's compile-time cycle estimates for a netlist op (shared/specs/tenstorrent.md §B.4):
the "theoretical" matmul cycles, the backend op model's fitted formulas (Wormhole B0 params
v3, bundled), and the limiter cycles of the balancer's DRAM / NoC / PCIe bandwidth rules."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd
import yaml

from opatlas.devices import FIDELITY_PHASES, TILE_FLOP, tensix_flop_per_cycle
from opatlas.errors import OpatlasError
from opatlas.tenstorrent.netlist import TILE_BYTES, Netlist, NetOp

MATH_FIDELITY = FIDELITY_PHASES
# an op that states no math_fidelity: the op model (an estimate) keeps the HiFi4 it always
# assumed; the theoretical cycles (a bound) take the FPU's fastest, LoFi: a bound whatever it ran at
MODEL_FIDELITY, BOUND_FIDELITY = "HiFi4", "LoFi"
UNARY = {"abs", "cosine", "datacopy", "dropout", "ethernet_datacopy", "exp", "gelu",
         "gelu_derivative", "log", "lrelu", "nop", "power", "reciprocal", "reduce", "sigmoid",
         "sine", "sqrt", "square", "tanh", "tilizer"}
BINARY = {"add", "subtract", "multiply", "quantization", "dequantization", "requantization",
          "maximum"}
BFP = {"Bfp2", "Bfp2_b", "Bfp4", "Bfp4_b", "Bfp8", "Bfp8_b"}
# TILE_BYTES (netlist.py, which checks each data format against it): bytes of one 32x32 tile
# balancer bandwidth rules (policy_utils.cpp get_op_cycles_estimates), bytes per cycle
NOC_BW = 32 / 2.0          # noc_bw / inefficiency_divider
WH_DRAM_BW = 20.4          # wh_dram_observed_max
WH_DRAM_CHANNELS, WH_DRAM_SUBCHANNELS = 6, 2
PCIE_BW = 24.0


@cache
def params(arch: str = "wormhole_b0") -> dict[str, dict[str, dict[str, float]]]:
    if arch not in ("wormhole_b0", "wormhole"):
        raise OpatlasError(f"the netlist-only estimate needs the backend op model's fitted "
                           f"parameters, bundled for Wormhole B0 only, not {arch}; a run "
                           f"folder with perf_results is analysed for any arch")
    f = resources.files("opatlas") / "data" / "tt-buda" / "op_model_params_wormhole_b0_v3.yaml"
    return yaml.safe_load(f.read_text())


@dataclass
class OpEstimate:
    cycles: int | None         # the op model's kernel cycles per input (None: not modelled)
    theoretical: int | None    # matmul: math-bound cycles
    limiter_cycles: int | None
    limiter: str               # compute | dram in<i> | noc in<i> | pcie in<i> | output
    model: str                 # which formula and parameter set
    note: str = ""


def _tags(op: NetOp) -> set[str]:
    a, df = op.attributes, (op.in_df[0] if op.in_df else op.out_df)
    tags = set()
    if df in BFP:
        tags.add("df_bfp")
    if df.lower() in ("int8", "int32"):
        tags.add(f"df_{df.lower()}")
    if a.get("l1_acc"):
        tags.add("l1_acc_en")
    if a.get("approximate_mode"):
        tags.add("approx")
    if a.get("vector") in ("r", "c"):
        tags.add(f"vector_{a['vector']}")
    if op.type == "reduce" and a.get("dim") == "c":
        tags.add("dim_c")
    return tags


def param_set(sets: dict[str, dict[str, float]], tags: set[str]) -> tuple[str, dict[str, float]]:
    """The most specialised set whose attributes the op has (later keys win ties, as the
    backend traverses level-2 keys in reverse); ``base`` otherwise."""
    best, best_n = "base", 0
    for key in sets:
        parts = key.split("/")
        if key != "base" and set(parts) <= tags and len(parts) >= best_n:
            best, best_n = key, len(parts)
    return best, sets[best]


def matmul_v2(t: int, mblock_m: int, mblock_n: int, ublock_rt: int, ublock_ct: int, m_k: int,
              u_kt: int, fidelity: int, p: dict[str, float]) -> float:
    """The Wormhole dense matmul op model (V2); vectorises over numpy arrays."""
    num_ublocks = m_k * mblock_m * mblock_n
    math_tiles = num_ublocks * u_kt * ublock_rt * ublock_ct
    spill_tiles = (m_k - 1) * mblock_m * mblock_n * ublock_rt * ublock_ct
    unpack_tiles = u_kt * ublock_rt * (1 + ublock_ct) * num_ublocks
    return t * (math_tiles * fidelity * p["math_tiles_weight"]
                + spill_tiles * p["math_dest_spill_weight"]
                + num_ublocks * p["unpack_ublocks_weight"]
                + unpack_tiles * p["unpack_tiles_weight"])


def theoretical_matmul(op: NetOp, arch: str) -> int:
    """PyBuda's math-bound cycles: tile products · phases · cycles per tile and phase (the
    Tensix FPU's rate, :func:`opatlas.devices.tensix_flop_per_cycle`: Wormhole 16, Grayskull
    32) at the fidelity the op states."""
    tile_cycles = TILE_FLOP / tensix_flop_per_cycle(arch, op.math_fidelity or BOUND_FIDELITY)
    return round(op.t * op.m_k * op.mblock[0] * op.mblock[1] * op.u_kt * op.ublock[0]
                 * op.ublock[1] * tile_cycles)


def kernel_cycles(op: NetOp, arch: str) -> tuple[int | None, str]:
    """The op model's cycles per input and which model gave them."""
    table = params(arch)
    num_ublocks = op.mblock[0] * op.mblock[1]
    num_tiles = num_ublocks * op.ublock[0] * op.ublock[1]
    if op.type == "matmul":
        if op.is_sparse:
            # the backend's sparse formulas take the sparse tensor's non-zero tile, ublock and
            # strip counts, which PyBuda computes from the tensor; the netlist does not carry them
            return None, "sparse matmul: not modelled (its non-zero tile count is not in the netlist)"
        if op.u_kt is None:
            return None, "matmul without m_k/u_kt attributes"
        key, p = param_set(table["matmul"], _tags(op))
        cyc = matmul_v2(op.t, op.mblock[0], op.mblock[1], op.ublock[0], op.ublock[1], op.m_k,
                        op.u_kt, MATH_FIDELITY[op.math_fidelity or MODEL_FIDELITY], p)
        return int(cyc), f"matmul v2 [{key}]"
    if op.type in BINARY and op.type in table:
        key, p = param_set(table[op.type], _tags(op))
        df = op.in_df[0] if op.in_df else op.out_df
        dfw = 2 if df in ("Float16", "Float16_b") else 4 if df in ("Float32", "Tf32") else 1
        cyc = op.t * (num_ublocks * p["ublock_weight"] + num_tiles * p["tile_weight"] * dfw)
        return int(cyc), f"binary {op.type} [{key}]"
    if op.type == "splice" or op.type in UNARY or op.type in table:
        name = op.type if op.type in table else "nop"
        if op.type == "reduce" and op.attributes.get("dim") == "z":
            p = table["reduce_z"]["base"]
            z = int(op.attributes.get("z", 1))
            cyc = op.t * z * (num_ublocks * p["ublock_weight"] + num_tiles * p["tile_weight"]
                              + p["z_weight"])
            return int(cyc), "reduce_z [base]"
        key, p = param_set(table[name], _tags(op))
        cyc = op.t * (num_ublocks * p["ublock_weight"] + num_tiles * p["tile_weight"])
        label = f"unary {name} [{key}]" if name == op.type else f"nop params [{key}]"
        return int(cyc), label
    # fused ops and ops without fitted parameters: the backend's default unary path
    p = table["nop"]["base"]
    cyc = op.t * (num_ublocks * p["ublock_weight"] + num_tiles * p["tile_weight"])
    return int(cyc), f"{op.type}: no fitted model, nop params"


def tile_bytes(df: str) -> int:
    """Bytes of one tile of data format ``df`` (load_netlist admits no other)."""
    try:
        return TILE_BYTES[df]
    except KeyError:
        raise OpatlasError(f"unknown data format {df!r}; known: {', '.join(TILE_BYTES)}"
                           ) from None


def input_tiles_per_core(op: NetOp, i: int) -> int:
    """Tiles of input ``i`` one core reads per input (matmul: its row or column strip of K)."""
    if op.type == "matmul" and op.u_kt is not None and i < 2:
        k = op.m_k * op.u_kt
        if i == 0:
            return op.t * op.mblock[0] * op.ublock[0] * k
        return op.t * k * op.mblock[1] * op.ublock[1]
    return op.tiles_per_core


def dram_bw(arch: str, dram_cores: int) -> float:
    if arch.startswith("wormhole"):
        div = max(2, math.ceil(dram_cores / (WH_DRAM_CHANNELS * WH_DRAM_SUBCHANNELS / 1.5)))
        return WH_DRAM_BW / div
    return WH_DRAM_BW / 2  # grayskull: same rule without channel data


def input_pipe(op: NetOp, i: int, nl: Netlist, graph_ops: dict[str, NetOp]) -> str:
    """Where input ``i`` comes from, by the balancer's rule: noc (an op of the epoch), pcie (a
    host queue), dram (a non-prologue DRAM queue) or prologue (loaded into L1 once, not read
    per input). :func:`limiter` reads each at its bandwidth; the analyzer counts its bytes."""
    name = op.inputs[i]
    q = nl.queues.get(name)
    if name in graph_ops or (q is None and any(name in g for g in nl.ops.values())):
        return "noc"  # an op of the epoch (of another chip's graph: over ethernet, as PyBuda)
    if q is None:  # load_netlist refuses such a netlist; a Netlist built otherwise may not
        raise OpatlasError(f"input {i} of op {op.name}, {name!r}, names no queue and no op "
                           f"of the netlist")
    if q.loc == "host":
        return "pcie"
    return "dram" if op.input_is_dram[i] else "prologue"


def limiter(op: NetOp, kernel: int, netlist: Netlist, graph_ops: dict[str, NetOp]
            ) -> tuple[int, str]:
    """max(kernel, each input's read cycles, the output's write cycles). The op's grid has a
    core at least (load_netlist checks it): PCIe and DRAM bandwidth are shared by its cores."""
    if op.cores < 1:
        raise OpatlasError(f"op {op.name} has grid {list(op.grid)}: no core to run on")
    best, why = kernel, "compute"
    for i in range(len(op.inputs)):
        kind = input_pipe(op, i, netlist, graph_ops)
        if kind == "prologue":
            continue  # loaded into L1 once, not read per input
        bw = {"noc": NOC_BW, "pcie": PCIE_BW / op.cores}.get(kind) or \
            dram_bw(netlist.arch, op.cores)
        df = op.in_df[i] if i < len(op.in_df) else op.out_df
        cyc = math.ceil(input_tiles_per_core(op, i) * tile_bytes(df) / bw)
        if cyc > best:
            best, why = cyc, f"{kind} in{i}"
    out_bytes = op.tiles_per_core * tile_bytes(op.out_df)
    bw = dram_bw(netlist.arch, op.cores) if op.output_is_dram else NOC_BW
    cyc = math.ceil(out_bytes / bw)
    if cyc > best:
        best, why = cyc, "output"
    return best, why


def estimate(op: NetOp, netlist: Netlist, graph_ops: dict[str, NetOp]) -> OpEstimate:
    cyc, model = kernel_cycles(op, netlist.arch)
    theo = theoretical_matmul(op, netlist.arch) if op.is_dense_matmul else None
    if cyc is None:
        return OpEstimate(None, theo, None, "unknown", model)
    lim, why = limiter(op, cyc, netlist, graph_ops)
    return OpEstimate(cyc, theo, lim, why, model)


def matmul_check(csv_path: Any = None) -> dict[str, Any]:
    """The Wormhole V2 matmul formula (BFP8 parameters) against the backend's measured matmul
    runtimes (bundled): per-row error of the formula's cycles vs the measured runtime."""
    src = csv_path or (resources.files("opatlas") / "data" / "tt-buda"
                       / "matmul_bfp8_op_performance_wormhole_b0.csv")
    with (open(src) if csv_path else src.open()) as fh:
        df = pd.read_csv(fh)
    p = params()["matmul"]["df_bfp"]
    fid = df["math_fidelity"].map(MATH_FIDELITY).to_numpy()
    pred = matmul_v2(df["t"].to_numpy(), df["mblock_m"].to_numpy(), df["mblock_n"].to_numpy(),
                     df["ublock_rt"].to_numpy(), df["ublock_ct"].to_numpy(),
                     df["m_k"].to_numpy(), df["u_kt"].to_numpy(), fid, p)
    err = (pred - df["runtime"].to_numpy()) / df["runtime"].to_numpy()
    return {"rows": len(df), "params": "matmul df_bfp (Wormhole B0 v3)",
            "mean_abs_error_pct": round(float(np.mean(np.abs(err))) * 100, 2),
            "median_abs_error_pct": round(float(np.median(np.abs(err))) * 100, 2),
            "max_abs_error_pct": round(float(np.max(np.abs(err))) * 100, 2),
            "mean_signed_error_pct": round(float(np.mean(err)) * 100, 2)}
