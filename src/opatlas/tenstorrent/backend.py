"""``--backend wormhole-sim``: the reshard simulator as a backend (deterministic, in-process)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from opatlas.backends.base import Backend
from opatlas.errors import InvalidShape
from opatlas.ops.base import Op
from opatlas.tenstorrent.reshard import parse_grid
from opatlas.tenstorrent.sim import WormholeParams, calibrated_params, simulate

PARAMS_ENV = "OPATLAS_WORMHOLE_PARAMS"


class WormholeSimBackend(Backend):
    name = "wormhole-sim"
    in_process = True  # pure Python, cannot crash or hang: no worker process needed

    def __init__(self, params: str | None = None) -> None:
        path = params or os.environ.get(PARAMS_ENV)
        self.params = WormholeParams.load(path) if path else calibrated_params()

    def device_name(self) -> str:
        return "wormhole_b0-sim"

    def versions(self) -> dict[str, str]:
        return {"simulator": "2", **{k: str(v) for k, v in vars(self.params).items()}}

    def measure(self, op: Op, params: Mapping[str, Any], passes: Sequence[str], repeats: int,
                warmup: int) -> dict[str, list[int]]:
        if op.name != "reshard":
            raise InvalidShape(f"wormhole-sim only simulates reshard, not {op.name!r}")
        shape = params["input_shape"]
        r = simulate(int(shape[-2]) // 32, int(shape[-1]) // 32,
                     parse_grid(params["input_core_grid"]), params["input_shard_strategy"],
                     parse_grid(params["output_core_grid"]), params["output_shard_strategy"],
                     self.params, params.get("dtype", "bfloat16"))
        return {"fwd": [round(r.time_ns)]}
