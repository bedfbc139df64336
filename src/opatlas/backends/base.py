"""The ``Backend`` interface and the backend registry."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opatlas.errors import OpatlasError
from opatlas.ops.base import Op

_BACKENDS: dict[str, str] = {
    "cpu": "opatlas.backends.cpu:CpuBackend",
    "cuda": "opatlas.backends.cuda:CudaBackend",
    "wormhole-sim": "opatlas.tenstorrent.backend:WormholeSimBackend",
    "ttnn": "opatlas.tenstorrent.ttnn_backend:TtnnBackend",
}
# The ops a backend runs, for a backend that runs only some (the Tenstorrent ones run reshard
# alone). Such an op runs on those backends only; every other op runs on the backends not
# listed here (PyTorch's, whose devices build any catalog or user op).
_BACKEND_OPS: dict[str, tuple[str, ...]] = {
    "wormhole-sim": ("reshard",),
    "ttnn": ("reshard",),
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


MAX_FILL_REPEATS = 10_000  # a pass timed for min_time_ms never takes more samples than this
MIN_TIME_MS = (0.001, 60_000.0)  # min_time_ms's range: 1 µs (less rounds to off) to a minute


def min_time_ns(value: float | str | None) -> int:
    """The ``min_time_ms`` backend option in ns (0: off); a clear error for a bad value."""
    if value is None:
        return 0
    try:
        ms = float(value)  # type: ignore[arg-type]
    except ValueError:
        raise ValueError(f"min_time_ms must be a number of milliseconds, got {value!r}") from None
    if not math.isfinite(ms) or ms < 0:
        raise ValueError(f"min_time_ms must be >= 0 (0: off), got {value!r}")
    if ms and not MIN_TIME_MS[0] <= ms <= MIN_TIME_MS[1]:
        raise ValueError(f"min_time_ms must be 0 (off) or from {MIN_TIME_MS[0]:g} to "
                         f"{MIN_TIME_MS[1]:g} (a minute per pass), got {value!r}")
    return int(ms * 1e6)


def repeats_to_fill(min_ns: int, samples: Sequence[int]) -> int:
    """How many more timed repeats bring ``samples`` (ns) to at least ``min_ns`` in all, at
    their mean duration, never past :data:`MAX_FILL_REPEATS` samples. Short ops then get as
    many samples as their time allows (like Triton's ``do_bench``), so a sweep of 20 µs ops
    spends its time running them, not in each vector's fixed overhead."""
    left, n = min_ns - sum(samples), len(samples)
    if min_ns <= 0 or left <= 0 or not n:
        return 0
    mean = max(sum(samples) / n, 1.0)
    return max(0, min(MAX_FILL_REPEATS - n, math.ceil(left / mean)))


def filled_samples(take: Callable[[int], list[int]], repeats: int, min_ns: int) -> list[int]:
    """``take(repeats)``'s samples, then more until they sum to ``min_ns``
    (:func:`repeats_to_fill`; a loop, as the first samples' mean may run high)."""
    samples = take(repeats)
    while more := repeats_to_fill(min_ns, samples):
        samples += take(more)
    return samples


def min_time_version(min_ns: int) -> dict[str, str]:
    """The ``versions()`` entry of a ``min_time_ms`` setting (none when off): stored repeats
    are then fill results, which :func:`opatlas.run.runner.setting_changes` reads so."""
    return {"min_time_ms": f"{min_ns / 1e6:g}"} if min_ns else {}


def register_backend(name: str, target: str, ops: Sequence[str] | None = None) -> None:
    """Register ``"module:Class"`` under ``name`` (imported on first use); ``ops``: the only
    ops it runs (default: any op that no backend registered with ``ops`` claims)."""
    _BACKENDS[name] = target
    if ops is None:
        _BACKEND_OPS.pop(name, None)
    else:
        _BACKEND_OPS[name] = tuple(ops)


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


def runs_op(backend: str, op: str) -> bool:
    """Whether ``backend`` runs ``op``, read from the registry without importing either."""
    if backend in _BACKEND_OPS:
        return op in _BACKEND_OPS[backend]
    return not any(op in ops for ops in _BACKEND_OPS.values())


def backends_for(op: str) -> list[str]:
    """The registered backends that run ``op``, in the order they were registered (the
    simulator before the card it simulates)."""
    return [b for b in _BACKENDS if runs_op(b, op)]


def check_backend_op(backend: str, op: str) -> None:
    """Refuse ``op`` on a backend that does not run it, naming the backends that do: every
    vector would only be recorded as invalid, one by one."""
    _backend_class(backend)  # an unknown backend is named as such
    if runs_op(backend, op):
        return
    only = _BACKEND_OPS.get(backend)
    what = f"runs only {', '.join(only)}, not op {op!r}" if only else f"cannot run op {op!r}"
    others = backends_for(op)
    hint = (f"; {op} runs on {', '.join(others)} (--backend {others[0]})" if others
            else f"; no backend runs {op}")
    raise OpatlasError(f"backend {backend!r} {what}{hint}")


def check_backend_options(name: str, options: dict[str, Any]) -> type:
    """The backend's class, once ``options`` are names it takes (checked without building it:
    a driver that runs nothing itself can refuse a bad option before any worker starts)."""
    klass = _backend_class(name)
    _check_options(name, klass, options)
    empty = [k for k, v in options.items() if isinstance(v, str) and not v.strip()]
    if empty:  # not "the default" (the option left out): a value lost on the way here
        raise OpatlasError(f"backend {name!r}: option(s) {', '.join(empty)} given an empty "
                           f"value; give KEY=VALUE, or leave the option out for its default")
    return klass


def get_backend(name: str, **options: Any) -> Backend:
    klass = check_backend_options(name, options)
    try:
        backend = klass(**options)
    except (TypeError, ValueError) as exc:
        raise OpatlasError(f"backend {name!r}: bad option(s) {options}: {exc}") from None
    ok, why = backend.available()
    if not ok:
        raise OpatlasError(f"backend {name!r} cannot run here: {why}")
    return backend
