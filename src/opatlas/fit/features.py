"""Model features for an op: the raw shape, the catalog's analytical counts (FLOPs, bytes,
arithmetic intensity), the roofline time on the device, and wave/tile quantisation counts for
GEMM-like ops; plus estimate-train-time's own feature maps for the baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd

from opatlas.devices import Device
from opatlas.errors import OpatlasError, UnknownOpError
from opatlas.ops.basic import padded_vocab
from opatlas.ops.batch import batch_counts

TILE_MN, TILE_K = 128, 64


def _gemm_dims(counts: pd.DataFrame) -> tuple[np.ndarray, ...] | None:
    c = counts
    if {"tokens", "in_features", "out_features"} <= set(c):
        return np.ones(len(c)), c["tokens"], c["out_features"], c["in_features"]
    if {"batch", "m", "k", "n"} <= set(c):
        return c["batch"], c["m"], c["n"], c["k"]
    return None


def op_features(op: str, pass_: str, shapes: pd.DataFrame, device: Device, dtype: str
                ) -> pd.DataFrame:
    """Features per row of ``shapes``; ``roofline_us`` is NaN for ops without counts."""
    X = shapes.select_dtypes("number").astype(float).copy()
    try:
        counts = batch_counts(op, shapes.assign(dtype=dtype))
    except (UnknownOpError, KeyError, TypeError, ValueError, OpatlasError):
        X["roofline_us"] = np.nan
        return X
    flops, nbytes = counts.get(f"flops_{pass_}"), counts.get(f"bytes_{pass_}")
    if flops is None or nbytes is None:
        X["roofline_us"] = np.nan
        return X
    for col in counts.columns:
        if not col.startswith(("flops_", "bytes_")):
            X[f"f_{col}"] = counts[col].to_numpy()
    flops, nbytes = flops.to_numpy(), nbytes.to_numpy()
    X["log_flops"] = np.log1p(flops)
    X["log_bytes"] = np.log1p(nbytes)
    X["intensity"] = flops / np.maximum(nbytes, 1.0)
    roof = np.maximum(flops / device.peak(dtype), nbytes / device.bandwidth) * 1e6
    X["roofline_us"] = roof
    X["log_roofline"] = np.log(np.maximum(roof, 1e-6))
    if {"heads", "l", "head_dim"} <= set(counts):  # attention: one CTA per (b, head, 128 rows)
        b = counts.get("b", 1.0)
        tiles = np.asarray(b * counts["heads"] * np.ceil(counts["l"] / TILE_MN), dtype=float)
        waves = np.ceil(tiles / device.compute_units)
        X["tiles"], X["waves"] = tiles, waves
        X["wave_efficiency"] = tiles / (waves * device.compute_units)
        X["seq_efficiency"] = counts["l"] / (np.ceil(counts["l"] / TILE_MN) * TILE_MN)
        padded = np.ceil(counts["head_dim"] / 32) * 32  # flash kernels pad head_dim to 32s
        X["head_dim_padded"] = padded
        X["head_dim_efficiency"] = counts["head_dim"] / padded
    g = _gemm_dims(counts)
    if g is not None:
        b, m, n, k = (np.asarray(v, dtype=float) for v in g)
        tiles = b * np.ceil(m / TILE_MN) * np.ceil(n / TILE_MN)
        waves = np.ceil(tiles / device.compute_units)
        X["tiles"] = tiles
        X["waves"] = waves
        X["wave_efficiency"] = tiles / (waves * device.compute_units)
        X["k_efficiency"] = k / (np.ceil(k / TILE_K) * TILE_K)
    return X


def ett_features(op: str, shapes: pd.DataFrame) -> pd.DataFrame:
    """estimate-train-time's ``layer_input_to_predictor_input`` maps (vocab fixed at 50,257)."""
    s = {c: shapes[c].to_numpy(dtype=np.int64) for c in shapes.select_dtypes("number")}
    g = s.get
    if op in ("linear1", "linear2", "linear3", "linear4", "linear_final", "embedding",
              "flash_atten", "RoPE", "bmm", "baddbmm", "gelu", "parallel_cross_entropy_128"):
        lb = g("l") * g("b")
        mp = g("mp") if "mp" in s else None
        vocab = padded_vocab(50257, mp) if mp is not None else None
        cols = {
            "linear1": [lb, g("dim"), 3 * g("dim") // mp if mp is not None else None],
            "linear2": [lb, g("dim") // mp if mp is not None else None, g("dim")],
            "linear3": [lb, g("dim"), 4 * g("dim") // mp if mp is not None else None],
            "linear4": [lb, 4 * g("dim") // mp if mp is not None else None, g("dim")],
            "linear_final": [lb, g("dim"), vocab],
            "embedding": [lb, vocab, g("dim")],
            "gelu": [g("l"), g("b"), 4 * g("dim") // mp if mp is not None else None],
            "parallel_cross_entropy_128": [g("b"), g("l"), vocab],
        }.get(op)
        if cols is None and "h" in s:
            hm, dh = g("h") // g("mp"), g("dim") // g("h")
            cols = {"flash_atten": [g("b"), g("l"), hm, dh], "RoPE": [g("l"), g("b"), hm, dh],
                    "bmm": [g("b") * hm, g("l"), g("l"), dh],
                    "baddbmm": [g("b") * hm, g("l"), dh, g("l")]}[op]
        if cols is not None and all(c is not None for c in cols):
            return pd.DataFrame({f"x{i}": c for i, c in enumerate(cols)}, index=shapes.index)
    return shapes.select_dtypes("number").astype(float)
