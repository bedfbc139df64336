"""Reshard results -> the seed's fitting frame, and one model for every grid pair."""

from __future__ import annotations

import numpy as np
import pandas as pd

from opatlas.tenstorrent.calibrate import group_name


def reshard_frame(results: pd.DataFrame) -> pd.DataFrame:
    """``in_grid, out_grid, group, tiles, y`` (mean kernel ns) from stored reshard results."""
    ok = results[(results["status"] == "ok") & results["mean_ns"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=["in_grid", "out_grid", "group", "tiles", "y"])
    shape = np.array(ok["input_shape"].tolist())
    return pd.DataFrame({
        "in_grid": ok["input_core_grid"].to_numpy(), "out_grid": ok["output_core_grid"].to_numpy(),
        "group": [group_name(a, b) for a, b in zip(ok["input_shard_strategy"],
                                                   ok["output_shard_strategy"], strict=True)],
        "tiles": shape[:, -2] * shape[:, -1] // 1024, "y": ok["mean_ns"].to_numpy()})
