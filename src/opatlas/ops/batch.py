"""Evaluate an op's analytical counts and features for a whole table of shapes at once.

The catalog's formulas take scalars or numpy arrays (see ``opatlas.ops.base.I``), so a table of
N shapes costs a handful of numpy operations per formula instead of N Python calls. Rows are
grouped by their non-numeric parameters (dtype, role, ...) first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from opatlas.ops.registry import get_op


def batch_counts(op_name: str, shapes: pd.DataFrame) -> pd.DataFrame:
    """Per row: ``flops_<pass>``, ``bytes_<pass>`` and every feature of the op; same index."""
    op, fixed = get_op(op_name)
    table = shapes.copy()
    for k, v in {**op.defaults, **fixed}.items():
        if k not in table:
            table[k] = v
    if "dtype" not in table:
        table["dtype"] = "fp32"
    keys = [c for c in table.columns if table[c].dtype == object or c in ("dtype", "role", "stage")
            or not pd.api.types.is_numeric_dtype(table[c])]
    single = all(table[k].nunique() <= 1 for k in keys)
    groups = [(tuple(table[k].iloc[0] for k in keys), table)] if single else \
        table.groupby(keys, sort=False)
    parts = []
    for key_vals, g in groups:
        p: dict = dict(zip(keys, key_vals if isinstance(key_vals, tuple) else (key_vals,),
                           strict=True))
        for c in g.columns:
            if c not in keys:
                p[c] = g[c].to_numpy()
        n = len(g)
        out = {}
        for name, fn in (("flops", op.flops), ("bytes", op.min_bytes)):
            for pass_, v in fn(p).items():
                out[f"{name}_{pass_}"] = np.broadcast_to(np.asarray(v, dtype=np.float64), (n,))
        for feat, v in op.features(p).items():
            out[feat] = np.broadcast_to(np.asarray(v, dtype=np.float64), (n,))
        parts.append(pd.DataFrame(out, index=g.index))
    return parts[0] if len(parts) == 1 else pd.concat(parts).loc[shapes.index]
