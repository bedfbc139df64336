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


def _ett_maps() -> dict:
    """estimate-train-time's feature map per op, as functions of the shape columns."""
    def vocab(s):
        return padded_vocab(50257, s["mp"]) // s["mp"]  # upstream: ceil(50257/(128·mp))·128

    def heads(s):
        return s["h"] // s["mp"], s["dim"] // s["h"]

    return {
        "linear1": lambda s: [s["l"] * s["b"], s["dim"], 3 * s["dim"] // s["mp"]],
        "linear2": lambda s: [s["l"] * s["b"], s["dim"] // s["mp"], s["dim"]],
        "linear3": lambda s: [s["l"] * s["b"], s["dim"], 4 * s["dim"] // s["mp"]],
        "linear4": lambda s: [s["l"] * s["b"], 4 * s["dim"] // s["mp"], s["dim"]],
        "linear_final": lambda s: [s["l"] * s["b"], s["dim"], vocab(s)],
        "embedding": lambda s: [s["b"] * s["l"], vocab(s), s["dim"]],
        "gelu": lambda s: [s["l"], s["b"], 4 * s["dim"] // s["mp"]],
        "parallel_cross_entropy_128": lambda s: [s["b"], s["l"], vocab(s)],
        "flash_atten": lambda s: [s["b"], s["l"], *heads(s)],
        "RoPE": lambda s: [s["l"], s["b"], *heads(s)],
        "bmm": lambda s: [s["b"] * heads(s)[0], s["l"], s["l"], heads(s)[1]],
        "baddbmm": lambda s: [s["b"] * heads(s)[0], s["l"], heads(s)[1], s["l"]],
    }


def ett_features(op: str, shapes: pd.DataFrame) -> pd.DataFrame:
    """estimate-train-time's ``layer_input_to_predictor_input`` maps (vocab fixed at 50,257);
    other ops use their raw shape, as upstream does."""
    s = {c: shapes[c].to_numpy(dtype=np.int64) for c in shapes.select_dtypes("number")}
    fn = _ett_maps().get(op)
    if fn is not None:
        try:
            cols = fn(s)
        except KeyError:
            cols = None
        if cols is not None:
            return pd.DataFrame({f"x{i}": c for i, c in enumerate(cols)}, index=shapes.index)
    return shapes.select_dtypes("number").astype(float)
