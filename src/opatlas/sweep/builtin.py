"""Specs built from Python rather than YAML (e.g. large generated sweeps)."""

from __future__ import annotations

from collections.abc import Callable

from opatlas.spec import SweepSpec

_BUILTIN: dict[str, Callable[[], SweepSpec]] = {}


def register_builtin_spec(name: str, factory: Callable[[], SweepSpec]) -> None:
    _BUILTIN[name] = factory


def _load() -> None:
    import importlib

    importlib.import_module("opatlas.tenstorrent.spec")
    importlib.import_module("opatlas.sweep.llm_catalog")


def builtin_spec(name: str) -> SweepSpec | None:
    _load()
    factory = _BUILTIN.get(name)
    return factory() if factory else None


def builtin_names() -> list[str]:
    from importlib import resources

    _load()
    files = resources.files("opatlas") / "specs"
    yml = [p.name[:-4] for p in files.iterdir() if p.name.endswith(".yml")]
    return sorted(set(yml) | set(_BUILTIN))
