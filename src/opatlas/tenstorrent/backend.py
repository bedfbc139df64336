"""``--backend wormhole-sim``: the reshard simulator as a backend (deterministic, in-process).

Its results are filed under device ``wormhole_b0-sim`` when it runs the bundled calibrated
parameters, and under ``wormhole_b0-sim-<fingerprint>`` when a parameters file
(``params=FILE`` or ``OPATLAS_WORMHOLE_PARAMS``) holds others: the store keys results by
device, so a resumed run reuses only the timings of the same parameters."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opatlas.backends.base import Backend
from opatlas.errors import InvalidShape
from opatlas.ops.base import Op
from opatlas.tenstorrent.reshard import parse_grid, shape_tiles
from opatlas.tenstorrent.sim import WormholeParams, calibrated_params, identical, simulate

PARAMS_ENV = "OPATLAS_WORMHOLE_PARAMS"
SIM_DEVICE = "wormhole_b0-sim"
CHIP = "wormhole_b0"  # the chip the simulator models, as the device catalog names it


class WormholeSimBackend(Backend):
    name = "wormhole-sim"
    in_process = True  # pure Python, cannot crash or hang: no worker process needed

    def __init__(self, params: str | None = None) -> None:
        env = os.environ.get(PARAMS_ENV)
        if params:
            self.params, self.device = load_params(params, f"--backend-opt params={params}")
        elif env:
            self.params, self.device = load_params(env, f"{PARAMS_ENV}={env}")
        else:
            self.params, self.device = calibrated_params(), SIM_DEVICE
        self._told_repeats = False

    def device_name(self) -> str:
        return self.device

    def versions(self) -> dict[str, str]:
        return {"simulator": "2", **{k: str(v) for k, v in vars(self.params).items()}}

    def measure(self, op: Op, params: Mapping[str, Any], passes: Sequence[str], repeats: int,
                warmup: int) -> dict[str, list[int]]:
        """One simulated time per vector, whatever ``repeats`` and ``warmup`` ask (said once):
        the simulator is deterministic. An identical memory config on both sides is 0 ns."""
        if op.name != "reshard":
            raise InvalidShape(f"wormhole-sim only simulates reshard, not {op.name!r}")
        self._say_repeats(repeats, warmup)
        try:
            ht, wt = shape_tiles(params["input_shape"])
        except ValueError as exc:
            raise InvalidShape(f"reshard {exc}") from None
        gin, gout = parse_grid(params["input_core_grid"]), parse_grid(params["output_core_grid"])
        sin, sout = params["input_shard_strategy"], params["output_shard_strategy"]
        if identical(gin, sin, gout, sout, params.get("input_shard_orientation", "ROW_MAJOR"),
                     params.get("output_shard_orientation", "ROW_MAJOR")):
            return {"fwd": [0]}
        r = simulate(ht, wt, gin, sin, gout, sout, self.params, params.get("dtype", "bfloat16"))
        return {"fwd": [round(r.time_ns)]}

    def _say_repeats(self, repeats: int, warmup: int) -> None:
        """Say once that asked-for repeats and warm-up runs are not run (nor recorded)."""
        if self._told_repeats or (repeats <= 1 and warmup <= 0):
            return
        self._told_repeats = True
        print(f"opatlas: wormhole-sim is deterministic: it simulates each vector once and "
              f"records repeats=1 ({repeats} repeats and {warmup} warm-up runs asked for)",
              file=sys.stderr)


def sim_device(params: WormholeParams) -> str:
    """The device the results of ``params`` are filed under: ``wormhole_b0-sim`` for the
    bundled calibrated parameters (as every store before parameter files were told apart),
    ``wormhole_b0-sim-<fingerprint>`` for any others."""
    return SIM_DEVICE if params == calibrated_params() else f"{SIM_DEVICE}-{params.fingerprint()}"


def chip_of(device: str) -> tuple[str, str] | None:
    """(the catalog's name of the chip, what the results are) for the devices the Tenstorrent
    backends file results under: ``wormhole_b0-sim`` under any parameters (simulated
    timings) and ttnn's ``wormhole_b0-card<N>`` (a card's, whose board is not recorded);
    None for any other."""
    name = str(device)
    if name == SIM_DEVICE or name.startswith(f"{SIM_DEVICE}-"):
        return CHIP, "simulated timings"
    if re.fullmatch(rf"{CHIP}-card\d+", name):
        return CHIP, "a card's timings (its board is not recorded)"
    return None


def load_params(path: str | Path, source: str | None = None) -> tuple[WormholeParams, str]:
    """The parameters of ``path`` and the device their results are filed under; ``source``:
    how the user named the file (the option or variable), for what is said of it. Read once
    per file and version of it: a command builds the backend more than once (its options are
    checked before the store is opened), and what the file lacks is said once."""
    try:
        st = Path(path).stat()
    except OSError:
        return _read(path, source)  # WormholeParams.load says why, in one line
    key = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size)
    if key not in _LOADED:
        _LOADED[key] = _read(path, source)
    return _LOADED[key]


_LOADED: dict[tuple[str, int, int], tuple[WormholeParams, str]] = {}


def _read(path: str | Path, source: str | None = None) -> tuple[WormholeParams, str]:
    params = WormholeParams.load(path, source)
    device = sim_device(params)
    if device != SIM_DEVICE:
        print(f"opatlas: {source or path}: not the bundled calibrated parameters: wormhole-sim "
              f"results are filed under device {device}", file=sys.stderr)
    return params, device
