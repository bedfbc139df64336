"""Op times for the estimator: fitted models of measured data where the data has the op,
the roofline (with efficiency factors) elsewhere, or the roofline only (analytical mode)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from opatlas.devices import Device
from opatlas.errors import OpatlasError
from opatlas.ops.batch import batch_counts


class RooflineTimes:
    def __init__(self, device: Device, dtype: str, compute_eff: float, memory_eff: float) -> None:
        self.device, self.dtype = device, dtype
        self.ce, self.me = compute_eff, memory_eff

    def __call__(self, op: str, shapes: pd.DataFrame, pass_: str) -> np.ndarray:
        """Seconds per row."""
        c = batch_counts(op, shapes.assign(dtype=self.dtype))
        flops, nbytes = c[f"flops_{pass_}"].to_numpy(), c[f"bytes_{pass_}"].to_numpy()
        return np.maximum(flops / (self.device.peak(self.dtype) * self.ce),
                          nbytes / (self.device.bandwidth * self.me))


class DataTimes(RooflineTimes):
    """The Predictor's models for ops the data has; the roofline for the others."""

    def __init__(self, device: Device, device_name: str, dtype: str, data: str,
                 compute_eff: float, memory_eff: float) -> None:
        super().__init__(device, dtype, compute_eff, memory_eff)
        from opatlas.predict import Predictor

        self.predictor = Predictor.shared(device=device_name, dtype=dtype, data=data)
        self.fallbacks: set[str] = set()

    def __call__(self, op: str, shapes: pd.DataFrame, pass_: str) -> np.ndarray:
        try:
            return self.predictor.predict(op, shapes, pass_=pass_) * 1e-6
        except OpatlasError:
            self.fallbacks.add(f"{op}/{pass_}")
            return super().__call__(op, shapes, pass_)
