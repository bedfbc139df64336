"""The ``Predictor``: models per (op, pass) fitted lazily from the bundled (or given) data,
cached in the model registry, evaluated on whole tables of shapes at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from opatlas.errors import OpatlasError
from opatlas.fit.data import data_hash, device_for, load_op_data, shapes_of
from opatlas.fit.distinct import distinct_rows
from opatlas.fit.recipes import RECIPE_REVISION, OpModel, make_model
from opatlas.fit.registry import ModelRegistry

# opatlas catalog names -> the names the estimate-train-time data uses
ETT_NAMES = {"flash_attention": "flash_atten", "rmsnorm": "RMSlayernorm", "rope": "RoPE",
             "masked_softmax": "ScaledUpperTriangMaskedSoftmax", "residual_add": "res_add",
             "cross_entropy": "parallel_cross_entropy_128"}
LINEAR_ROLES = {"qkv": "linear1", "out": "linear2", "ffn_up": "linear3", "ffn_down": "linear4",
                "vocab": "linear_final"}


class Predictor:
    """Predict op times (µs). ``data``: 'bundled' (A100), a store file or a CSV folder.

    ``Predictor.shared(...)`` returns one instance per argument set for the process, so models
    and data load once however many estimates ask."""

    _shared: dict[tuple, Predictor] = {}

    @classmethod
    def shared(cls, device: str = "NVIDIAA100-SXM4-80GB", dtype: str = "fp16",
               recipe: str = "hybrid", data: str | Path = "bundled") -> Predictor:
        key = (device, dtype, recipe, str(data))
        if key not in cls._shared:
            cls._shared[key] = cls(device=device, dtype=dtype, recipe=recipe, data=data)
        return cls._shared[key]

    def __init__(self, device: str = "NVIDIAA100-SXM4-80GB", dtype: str = "fp16",
                 recipe: str = "hybrid", data: str | Path = "bundled",
                 cache_dir: str | Path | None = None) -> None:
        self.device, self.dtype, self.recipe, self.data_source = device, dtype, recipe, data
        self.registry = ModelRegistry(cache_dir)
        self._data: pd.DataFrame | None = None
        self._models: dict[tuple[str, str, str, str], OpModel] = {}

    @property
    def data(self) -> pd.DataFrame:
        if self._data is None:
            self._data = load_op_data(self.data_source)
        return self._data

    def ops(self) -> list[str]:
        return sorted(self.op_names)

    @property
    def op_names(self) -> set[str]:
        if not hasattr(self, "_op_names"):
            self._op_names = set(self.data["op"].unique())
        return self._op_names

    def resolve_op(self, op: str, shapes: pd.DataFrame) -> tuple[str, pd.DataFrame]:
        if op in self.op_names:
            return op, shapes
        if op == "linear" and "role" in shapes:
            roles = shapes["role"].unique()
            if len(roles) != 1:
                raise OpatlasError("predict one linear role at a time")
            return LINEAR_ROLES[roles[0]], shapes.drop(columns=["role"])
        return ETT_NAMES.get(op, op), shapes

    def model(self, op: str, pass_: str, device: str | None = None, dtype: str | None = None
              ) -> OpModel:
        device, dtype = device or self.device, dtype or self.dtype
        key = (op, pass_, device, dtype)
        if key not in self._models:
            d = self.data
            rows = d[(d["op"] == op) & (d["pass"] == pass_) & (d["device"] == device)
                     & (d["dtype"] == dtype)]
            if rows.empty:
                have = sorted(set(zip(d["op"], d["pass"], strict=True)))
                raise OpatlasError(f"no {dtype} {pass_} data for op {op!r} on {device}; data "
                                   f"has {len(have)} (op, pass) pairs, e.g. {have[:6]}")
            shapes, y = shapes_of(rows), rows["y_us"].to_numpy(float)

            dev = device_for(device, rows, dtype)

            def fit() -> OpModel:
                return make_model(self.recipe, op, pass_, dev, dtype).fit(shapes, y)

            self._models[key] = self.registry.get_or_fit(
                (device, dtype, self.recipe, op, pass_), f"{data_hash(rows)}:r{RECIPE_REVISION}",
                list(shapes.columns), fit)
        return self._models[key]

    def predict(self, op: str, shapes: pd.DataFrame | Mapping[str, Any] | Sequence[Mapping],
                *, device: str | None = None, dtype: str | None = None,
                pass_: str = "fwd") -> np.ndarray:
        """Times in µs, one per shape (row)."""
        table = shapes if isinstance(shapes, pd.DataFrame) else pd.DataFrame(
            shapes if not isinstance(shapes, Mapping) else {k: np.atleast_1d(v)
                                                            for k, v in shapes.items()})
        name, table = self.resolve_op(op, table)
        model = self.model(name, pass_, device, dtype)
        first, codes = distinct_rows(table)
        if len(first) == len(table):
            return model.predict(table)
        return model.predict(table.iloc[first].reset_index(drop=True))[codes]
