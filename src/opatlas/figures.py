"""Where figures go: a plot path is checked before the work that feeds it (so a typo in
``--plot`` costs nothing and loses nothing) and the file is written whole or not at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opatlas.atomic import blocking_file
from opatlas.errors import OpatlasError


def _formats() -> set[str]:
    from matplotlib.backend_bases import FigureCanvasBase

    return set(FigureCanvasBase.get_supported_filetypes())


def check_plot_path(path: Path, option: str = "--plot") -> Path:
    """``path`` if a figure can be written there: a file name with a format matplotlib writes
    (.png, .pdf, .svg ...), not a folder. A missing parent folder is created when saving."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if path.is_dir():
        raise OpatlasError(f"{option} {path}: is a folder; give a file name such as "
                           f"{path / 'plot.png'}")
    if (blocker := blocking_file(path)) is not None:
        raise OpatlasError(f"{option} {path}: {blocker} is a file, not a folder")
    if fmt not in _formats():
        raise OpatlasError(f"{option} {path}: unknown figure format {path.suffix or '(none)'!r};"
                           f" use one of {', '.join(sorted(_formats()))}")
    return path


def save_figure(fig: Any, path: Path, option: str = "--plot") -> Path:
    """Write ``fig`` to ``path`` atomically and close it; errors name the option and path."""
    import matplotlib.pyplot as plt

    from opatlas.atomic import atomic_path

    path = check_plot_path(path, option)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=path.suffix.lower().lstrip("."))
    except OSError as exc:
        raise OpatlasError(f"{option} {path}: cannot write the figure: {exc.strerror or exc}"
                           ) from None
    finally:
        plt.close(fig)
    return path
