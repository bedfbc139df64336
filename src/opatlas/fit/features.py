"""Model features for an op: the raw shape, the catalog's analytical counts (FLOPs, bytes,
arithmetic intensity), the roofline time on the device, and wave/tile quantisation counts for
GEMM-like ops; plus estimate-train-time's own feature maps for the baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from opatlas.columns import Columns, as_columns, n_rows, to_frame
from opatlas.devices import Device
from opatlas.errors import OpatlasError, UnknownOpError
from opatlas.ops.basic import padded_vocab
from opatlas.ops.batch import count_columns

if TYPE_CHECKING:
    import pandas as pd

TILE_MN, TILE_K = 128, 64


def _gemm_dims(c: dict) -> tuple[np.ndarray, ...] | None:
    if {"tokens", "in_features", "out_features"} <= set(c):
        return np.ones(len(c["tokens"])), c["tokens"], c["out_features"], c["in_features"]
    if {"batch", "m", "k", "n"} <= set(c):
        return c["batch"], c["m"], c["n"], c["k"]
    return None


def feature_columns(op: str, pass_: str, shapes: Any, device: Device, dtype: str) -> Columns:
    """Features per row of ``shapes`` (numpy only); ``roofline_us`` is NaN for ops without
    counts."""
    table = as_columns(shapes)
    n = n_rows(table)
    cols: Columns = {c: v.astype(float) for c, v in table.items()
                     if v.dtype.kind in "iuf"}  # the shape's numbers, as pandas' "number"
    try:
        counts = count_columns(op, table, dtype=dtype)
    except (UnknownOpError, KeyError, TypeError, ValueError, OpatlasError):
        counts = None
    if counts is None or f"flops_{pass_}" not in counts or f"bytes_{pass_}" not in counts:
        cols["roofline_us"] = np.full(n, np.nan)
        return cols
    c = {k: np.asarray(v, dtype=float) for k, v in counts.items()}
    for k, v in c.items():
        if not k.startswith(("flops_", "bytes_")):
            cols[f"f_{k}"] = v
    flops, nbytes = c[f"flops_{pass_}"], c[f"bytes_{pass_}"]
    cols["log_flops"] = np.log1p(flops)
    cols["log_bytes"] = np.log1p(nbytes)
    cols["intensity"] = flops / np.maximum(nbytes, 1.0)
    roof = np.maximum(flops / device.peak(dtype), nbytes / device.bandwidth) * 1e6
    cols["roofline_us"] = roof
    cols["log_roofline"] = np.log(np.maximum(roof, 1e-6))
    units = device.compute_units
    if {"heads", "l", "head_dim"} <= set(c):  # attention: one CTA per (b, head, 128 rows)
        tiles = c.get("b", 1.0) * c["heads"] * np.ceil(c["l"] / TILE_MN)
        waves = np.ceil(tiles / units)
        cols.update(tiles=tiles, waves=waves, wave_efficiency=tiles / (waves * units),
                    seq_efficiency=c["l"] / (np.ceil(c["l"] / TILE_MN) * TILE_MN))
        padded = np.ceil(c["head_dim"] / 32) * 32  # flash kernels pad head_dim to 32s
        cols.update(head_dim_padded=padded, head_dim_efficiency=c["head_dim"] / padded)
    g = _gemm_dims(c)
    if g is not None:
        b, m, n_, k = (np.asarray(v, dtype=float) for v in g)
        tiles = b * np.ceil(m / TILE_MN) * np.ceil(n_ / TILE_MN)
        waves = np.ceil(tiles / units)
        cols.update(tiles=tiles, waves=waves, wave_efficiency=tiles / (waves * units),
                    k_efficiency=k / (np.ceil(k / TILE_K) * TILE_K))
    return cols


def op_features(op: str, pass_: str, shapes: pd.DataFrame, device: Device, dtype: str
                ) -> pd.DataFrame:
    """:func:`feature_columns` of a DataFrame, as a DataFrame with the same index."""
    return to_frame(feature_columns(op, pass_, shapes, device, dtype), index=shapes.index)


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
    import pandas as pd

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
