"""A diagnostic op that misbehaves on purpose, to prove the runner's guards.

``fault`` takes an index ``i`` and, when ``i`` equals one of ``hang_at``, ``crash_at``,
``segfault_at``, ``raise_at``, ``oom_at``, ``invalid_at``, does that; otherwise it sleeps
``sleep_ms`` (only while the file ``sleep_while`` exists, when one is named) and returns. The
file lets a test slow a sweep down, kill it, then resume the very same vectors at full speed.
It is hidden from ``opatlas ops`` listings.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Mapping
from typing import Any

from opatlas.errors import InvalidShape
from opatlas.ops.base import Op
from opatlas.ops.registry import register_op


@register_op
class Fault(Op):
    name = "fault"
    params = ("i",)
    defaults = {"hang_at": -1, "crash_at": -1, "segfault_at": -1, "raise_at": -1,
                "oom_at": -1, "invalid_at": -1, "sleep_ms": 0, "sleep_while": ""}
    passes = ("fwd",)

    def build(self, p: Mapping[str, Any], device: str) -> Any:
        return dict(p)

    def prepare(self, state: Any, pass_: str) -> Any:
        return None

    def execute(self, state: Any, pass_: str, prepared: Any) -> None:
        i = state["i"]
        if i == state["hang_at"]:
            while True:
                time.sleep(1)
        if i == state["crash_at"]:
            os._exit(3)
        if i == state["segfault_at"]:
            ctypes.string_at(0)
        if i == state["raise_at"]:
            raise RuntimeError(f"deliberate failure at i={i}")
        if i == state["oom_at"]:
            raise MemoryError(f"deliberate out-of-memory at i={i}")
        if i == state["invalid_at"]:
            raise InvalidShape(f"deliberately invalid shape at i={i}")
        if state["sleep_ms"] and (not state["sleep_while"]
                                  or os.path.exists(state["sleep_while"])):
            time.sleep(state["sleep_ms"] / 1000.0)
