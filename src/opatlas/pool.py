"""Independent CPU-bound tasks spread over worker processes, one per usable core.

Worker processes start in about a second (imports included), so callers use them only for
work of many seconds: held-out model fits, Orojenesis searches over thousands of GEMMs."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def workers_for(tasks: int, workers: int | None = None) -> int:
    """Processes for ``tasks`` tasks: ``workers`` (default one per usable core), at most one
    per task; 1 means this process."""
    return max(1, min(workers or usable_cores(), tasks))


def each(fn: Callable[[Any], Any], items: Sequence[Any], workers: int = 1
         ) -> Iterator[tuple[int, Any]]:
    """``(i, fn(items[i]))`` for every item, as they finish: in ``workers`` processes (``fn``
    and the items must pickle), or in this process, in order, for ``workers`` 1."""
    if workers <= 1 or len(items) <= 1:
        yield from ((i, fn(x)) for i, x in enumerate(items))
        return
    from joblib import Parallel, delayed

    yield from Parallel(n_jobs=workers, backend="loky", return_as="generator_unordered")(
        delayed(_numbered)(fn, i, x) for i, x in enumerate(items))


def _numbered(fn: Callable[[Any], Any], i: int, item: Any) -> tuple[int, Any]:
    return i, fn(item)
