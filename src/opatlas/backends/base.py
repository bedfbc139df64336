"""The ``Backend`` interface and the backend registry."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from opatlas.errors import OpatlasError
from opatlas.ops.base import Op

_BACKENDS: dict[str, str] = {
    "cpu": "opatlas.backends.cpu:CpuBackend",
    "cuda": "opatlas.backends.cuda:CudaBackend",
    "wormhole-sim": "opatlas.tenstorrent.backend:WormholeSimBackend",
    "ttnn": "opatlas.tenstorrent.ttnn_backend:TtnnBackend",
}


class Backend:
    """Runs ops on one device. Subclasses implement :meth:`measure` and describe the device."""

    name: str = ""
    # the dtypes it can run (``DTYPE_BYTES`` names); None: any (the ops decide)
    dtypes: tuple[str, ...] | None = None

    def available(self) -> tuple[bool, str]:
        """(usable here?, why not)."""
        return True, ""

    def device_name(self) -> str:
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        return {}

    def start(self) -> None:
        """Finish starting: the heavy imports and initialisation that the first vector would
        otherwise pay (PyTorch's import, a device context, lazily built thread pools). A worker
        process calls it before it says it is ready, so that start-up never counts against a
        vector's timeout. Idempotent; by default nothing."""

    def measure(self, op: Op, params: Mapping[str, Any], passes: Sequence[str], repeats: int,
                warmup: int) -> dict[str, list[int]]:
        """Per pass, ``repeats`` durations in nanoseconds (after ``warmup`` untimed runs)."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Release device memory after a failure (e.g. an OOM) so the sweep can go on."""


def register_backend(name: str, target: str) -> None:
    """Register ``"module:Class"`` under ``name`` (imported on first use)."""
    _BACKENDS[name] = target


def list_backends() -> list[str]:
    return sorted(_BACKENDS)


def _check_options(name: str, klass: type, options: dict[str, Any]) -> None:
    """Names each option the backend does not take, with the ones it does."""
    import inspect

    params = inspect.signature(klass.__init__).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params if p.name != "self" and p.kind is not p.VAR_POSITIONAL]
    unknown = [k for k in options if k not in known]
    if unknown:
        takes = ", ".join(known) if known else "no options"
        raise OpatlasError(f"backend {name!r}: unknown option(s) {', '.join(unknown)}; it takes "
                           f"{takes} (--backend-opt KEY=VALUE)")


def _backend_class(name: str) -> type[Backend]:
    try:
        target = _BACKENDS[name]
    except KeyError:
        raise OpatlasError(f"unknown backend {name!r}; known: {', '.join(list_backends())}") \
            from None
    module, cls = target.split(":")
    klass: type[Backend] = getattr(importlib.import_module(module), cls)
    return klass


def backend_dtypes(name: str) -> tuple[str, ...] | None:
    """The dtypes backend ``name`` can run (None: any), read without building it: a driver
    checks a sweep against a backend its machine may lack (a Ray cluster's GPUs)."""
    return _backend_class(name).dtypes


def get_backend(name: str, **options: Any) -> Backend:
    klass = _backend_class(name)
    _check_options(name, klass, options)
    try:
        backend = klass(**options)
    except (TypeError, ValueError) as exc:
        raise OpatlasError(f"backend {name!r}: bad option(s) {options}: {exc}") from None
    ok, why = backend.available()
    if not ok:
        raise OpatlasError(f"backend {name!r} cannot run here: {why}")
    return backend
