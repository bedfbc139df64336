"""``--backend ttnn``: the seed's ``run()`` on a real Tenstorrent card.

Allocate the input in the input memory config, ``ttnn.to_memory_config`` to the output config
``REPEATS`` times (deallocating each output explicitly), deallocate the input, and read the
device kernel durations from the device profiler (a profiler build: ``TT_METAL_DEVICE_PROFILER
=1``), in chunks of ``CHUNK`` vectors because a profiler read is slow (~7 ms per kernel). A hang
is handled by the runner's guard (the worker is killed); ``reset_command`` gives the ``tt-smi``
call that resets the card before the next vector, as tt-metal's sweep framework does.

The pure parts (memory-config arguments, profiler-row parsing, chunk bookkeeping) are plain
functions tested without a card.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opatlas.backends.base import Backend
from opatlas.errors import InvalidShape, OpatlasError
from opatlas.ops.base import Op
from opatlas.tenstorrent.reshard import parse_grid

REPEATS = 10
CHUNK = 50
DURATION_KEY = "DEVICE KERNEL DURATION [ns]"


def memory_config_args(shape: Sequence[int], grid: str, strategy: str,
                       orientation: str = "ROW_MAJOR") -> dict[str, Any]:
    """Arguments of ``ttnn.create_sharded_memory_config`` (enums as names) for one side."""
    x, y = parse_grid(grid)
    h, w = int(shape[-2]), int(shape[-1])
    if strategy == "BLOCK":
        shard = (h // y, w // x) if orientation == "ROW_MAJOR" else (h // x, w // y)
    elif strategy == "HEIGHT":
        shard = (h // (x * y), w)
    elif strategy == "WIDTH":
        shard = (h, w // (x * y))
    else:
        raise InvalidShape(f"unknown shard strategy {strategy!r}")
    if shard[0] % 32 or shard[1] % 32:
        raise InvalidShape(f"shard {shard} of {list(shape)} on {grid} {strategy} is not whole tiles")
    return {"shape": list(shape), "core_grid": (x, y), "strategy": strategy,
            "orientation": orientation, "shard_shape": shard}


def durations_from_profiler(rows: Sequence[Mapping[str, Any]], vectors: int) -> list[list[float]]:
    """Split the profiler's op rows of one chunk evenly over its vectors (the branch runner's
    ``runs_per_item = len(rows) // chunk``): per vector, its kernel durations in ns."""
    if vectors <= 0:
        raise ValueError("a chunk has at least one vector")
    runs = len(rows) // vectors
    if runs == 0:
        raise OpatlasError(f"profiler returned {len(rows)} ops for {vectors} vectors")
    values = [float(r[DURATION_KEY]) for r in rows]
    return [values[i * runs:(i + 1) * runs] for i in range(vectors)]


def chunks(n: int, size: int = CHUNK) -> list[range]:
    """Index ranges of consecutive chunks covering n vectors."""
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def reset_command(card: int = 0) -> list[str] | None:
    """The tt-smi reset for a hung card (env ``TT_SMI_RESET_COMMAND`` overrides)."""
    if os.environ.get("TT_SMI_RESET_COMMAND"):
        return os.environ["TT_SMI_RESET_COMMAND"].split()
    exe = shutil.which("tt-smi") or shutil.which("tt-smi-metal")
    return [exe, "-r", str(card)] if exe else None


class TtnnBackend(Backend):
    name = "ttnn"

    def __init__(self, card: int | str = 0) -> None:
        self.card = int(card)
        self._device: Any = None

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("ttnn") is None:
            return False, "the ttnn package is not importable (install tt-metal's Python package)"
        if not any(os.path.exists(f"/dev/tenstorrent/{i}") for i in range(8)):
            return False, "no Tenstorrent card under /dev/tenstorrent"
        return True, ""

    def device_name(self) -> str:
        return f"wormhole_b0-card{self.card}"

    def measure(self, op: Op, params: Mapping[str, Any], passes: Sequence[str], repeats: int,
                warmup: int) -> dict[str, list[int]]:  # pragma: no cover - needs a card
        import ttnn
        from tt_metal.tools.profiler.process_ops_logs import get_device_data_generate_report

        if op.name != "reshard":
            raise InvalidShape(f"the ttnn backend runs reshard, not {op.name!r}")
        if self._device is None:
            self._device = ttnn.open_device(device_id=self.card)
        dev = self._device
        cfg = {side: memory_config_args(params["input_shape"], params[f"{side}_core_grid"],
                                        params[f"{side}_shard_strategy"],
                                        params[f"{side}_shard_orientation"])
               for side in ("input", "output")}
        mem = {side: ttnn.create_sharded_memory_config(
            c["shape"], ttnn.CoreGrid(x=c["core_grid"][0], y=c["core_grid"][1]),
            getattr(ttnn.ShardStrategy, c["strategy"]),
            getattr(ttnn.ShardOrientation, c["orientation"])) for side, c in cfg.items()}
        inp = ttnn.zeros(params["input_shape"], layout=ttnn.TILE_LAYOUT, device=dev,
                         memory_config=mem["input"], dtype=ttnn.bfloat16)
        for _ in range(max(repeats, REPEATS)):
            out = ttnn.to_memory_config(inp, mem["output"])
            ttnn.deallocate(out)
        ttnn.deallocate(inp)
        ttnn.DumpDeviceProfiler(dev)
        rows = get_device_data_generate_report(os.environ.get("PROFILER_LOGS_DIR", "."), None,
                                               None, None, export_csv=False,
                                               cleanup_device_log=True)
        (samples,) = durations_from_profiler(rows, 1)
        return {"fwd": [int(v) for v in np.asarray(samples)]}
