"""Files written whole or not at all: caches and reports are written to a temporary file
beside their final path and renamed onto it.

The temporary name is unique to the writer: two commands fitting the same model into the
shared user cache at once (a demo beside an estimate) each rename their own complete file,
and the last one wins, instead of one renaming the other's half-written file away.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A fresh temporary path beside ``path``; what the block writes there replaces ``path``
    when the block ends without an error (and is removed when it fails). A symbolic link is
    followed (its target is replaced, the link stays); a FIFO or a device such as
    /dev/stdout is written in place, since it cannot be replaced."""
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():
        yield path  # through any link: /dev/stdout's target may be a pipe with no path
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 is for the temporary name only
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes, option: str | None = None) -> Path:
    """``data`` (text as UTF-8) as the whole content of ``path``. With ``option`` (a user's
    output, named by its command-line option) a path that cannot be written is one clear
    error, as :func:`write_output` gives."""
    raw = data.encode() if isinstance(data, str) else data
    if option is not None:
        return write_output(path, lambda tmp: tmp.write_bytes(raw), option)
    with atomic_path(path) as tmp:
        tmp.write_bytes(raw)
    return Path(path)


def _umask() -> int:
    """The process's current umask. Linux says it in /proc; elsewhere it is read by setting
    it for an instant (racy with another thread creating a file at that moment, so only
    where /proc cannot tell)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def blocking_file(path: str | Path) -> Path | None:
    """The file standing where a folder of ``path`` would have to be (``notes.txt`` of
    ``notes.txt/fig.png``: nothing can be made under it), or None."""
    blocker = next((p for p in Path(path).parents if p.exists()), None)
    return blocker if blocker is not None and not blocker.is_dir() else None


def write_output(path: str | Path, write: Callable[[Path], object], option: str = "--out"
                 ) -> Path:
    """A user's output file, written whole by ``write(tmp)`` (missing folders are made); a
    path that cannot be written is one clear error naming ``option``, not a traceback."""
    from opatlas.errors import OpatlasError

    path = Path(path)
    if str(path) == "-":  # standard output, as the usual convention has it
        return _to_stdout(write)
    if path.is_dir():
        raise OpatlasError(f"{option} {path}: is a folder; give a file name")
    if (blocker := blocking_file(path)) is not None:
        raise OpatlasError(f"{option} {path}: {blocker} is a file, not a folder")
    try:
        with atomic_path(path) as tmp:
            write(tmp)
    except OSError as exc:
        raise OpatlasError(f"{option} {path}: cannot write it: {exc.strerror or exc}") from None
    return path


def _to_stdout(write: Callable[[Path], object]) -> Path:
    """``write`` into a temporary file, then its bytes onto standard output."""
    import shutil
    import sys

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        write(out)
        sys.stdout.flush()
        with out.open("rb") as fh:
            shutil.copyfileobj(fh, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    return Path("-")
