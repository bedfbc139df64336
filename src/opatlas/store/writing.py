"""A store opened by a command that writes to it, and cleaned up when that command fails."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from opatlas.store.db import Store


@contextmanager
def store_for_writing(path: Path, keep_recorded_sweep: bool = False) -> Iterator[Store]:
    """The store at ``path``, opened for writing. One this command created is removed again
    when the command fails or is interrupted before recording anything (a run whose cluster
    cannot be reached, an import that adds nothing, leave no empty store behind); a store
    holding results is always kept. ``keep_recorded_sweep``: on an interrupt, a store made
    here that holds a recorded sweep is kept too (recording a large sweep takes minutes, and
    a resume goes on from it)."""
    existed = path.exists()
    try:
        with Store(path) as st:
            yield st
    except BaseException as exc:
        vectors_too = keep_recorded_sweep and isinstance(exc, KeyboardInterrupt)
        if not existed and _empty(path, vectors_too):
            for leftover in (path, path.with_name(path.name + ".wal")):
                leftover.unlink(missing_ok=True)
        raise


def _empty(path: Path, vectors_too: bool = False) -> bool:
    """Whether the store at ``path`` holds no result (and, ``vectors_too``, no recorded
    vector either); an unreadable one is not ours to judge: kept."""
    if path.exists() and path.stat().st_size == 0:  # made here, nothing written yet
        return True
    try:
        with Store(path, read_only=True) as st:
            return st.count() == 0 and not (vectors_too and st.count("vectors"))
    except Exception:  # unreadable: not ours to judge, keep it
        return False
