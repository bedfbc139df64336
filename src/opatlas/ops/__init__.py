"""The operator catalog: for each op, how to build inputs for a shape, run each pass, and count
FLOPs and minimum bytes moved.

Ops register themselves with :func:`register_op`. A user's own ops plug in the same way from
their module (``--ops-module path/to/ops.py``) or through the ``opatlas.ops`` entry point.
"""

from __future__ import annotations

from opatlas.ops.base import DTYPE_BYTES, Op, Rule, dtype_bytes
from opatlas.ops.registry import (
    get_op,
    list_ops,
    load_ops_module,
    register_alias,
    register_op,
)

__all__ = [
    "DTYPE_BYTES",
    "Op",
    "Rule",
    "dtype_bytes",
    "get_op",
    "list_ops",
    "load_ops_module",
    "register_alias",
    "register_op",
]
