"""Training data for op models: a results store, a folder of estimate-train-time CSVs, or the
bundled A100 dataset. One row per measured (vector, pass): op, pass, device, dtype, the shape
parameters, and ``y_us`` (the median time in µs)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from opatlas.errors import OpatlasError


def load_op_data(source: str | Path = "bundled") -> pd.DataFrame:
    from opatlas.store import Store
    from opatlas.store.ett import bundled_dataset, read_sample_file

    if str(source) == "bundled":
        source = bundled_dataset() / "operator"
    path = Path(source)
    if path.is_dir():
        rows = [r for f in sorted(path.rglob("*.csv")) for r in read_sample_file(f, counts=False)]
        if not rows:
            raise OpatlasError(f"no estimate-train-time sample CSVs under {path}")
        df = pd.DataFrame([{"op": r.op, "pass": r.pass_, "device": r.device, "dtype": r.dtype,
                            "params_json": r.params_json, "y_us": r.median_ns / 1000.0}
                           for r in rows])
    elif path.is_file():
        with Store(path, read_only=True) as st:
            res = st.results(expand_params=False)
        res = res[res["status"] == "ok"]
        df = pd.DataFrame({"op": res["op"], "pass": res["pass"], "device": res["device"],
                           "dtype": res["dtype"], "params_json": res["params_json"],
                           "y_us": res["median_ns"] / 1000.0, "flops": res["flops"],
                           "min_bytes": res["min_bytes"]})
    else:
        raise OpatlasError(f"--data {source}: no such store file or folder")
    df = df[~df["op"].str.startswith(("nccl.", "collective."))].reset_index(drop=True)
    return df


def shapes_of(df: pd.DataFrame) -> pd.DataFrame:
    """The parameter columns of a data subset (one op), numeric where possible."""
    shapes = pd.DataFrame([json.loads(s) for s in df["params_json"]], index=df.index)
    return shapes.drop(columns=[c for c in ("dtype",) if c in shapes])


def data_hash(df: pd.DataFrame) -> str:
    h = hashlib.sha256(pd.util.hash_pandas_object(df, index=False).values.tobytes())
    return h.hexdigest()[:16]


def device_for(name: str, rows: pd.DataFrame, dtype: str):
    """The catalog entry for ``name``, or an empirical roofline from ``rows``' own counts."""

    from opatlas.devices import empirical_device, get_device

    try:
        return get_device(name)
    except OpatlasError:
        if "flops" not in rows:
            raise
        return empirical_device(name, rows["flops"].to_numpy(float),
                                rows["min_bytes"].to_numpy(float),
                                rows["y_us"].to_numpy(float) * 1e-6, dtype)
