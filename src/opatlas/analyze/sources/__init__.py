"""Where an analysis comes from. Each source kind registers how to recognise its input and how
to read it into an :class:`~opatlas.analyze.model.Analysis`; ``opatlas analyze`` auto-detects
the kind from the path (``--kind`` overrides). Readers raise OpatlasError with one paragraph
naming the file and what is missing."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opatlas.analyze.model import Analysis
from opatlas.errors import OpatlasError

# modules that register kinds, imported on first use (each calls register() at import);
# Tenstorrent kinds first: config claims any YAML, and a PyBuda netlist is YAML too
_MODULES: list[str] = ["opatlas.analyze.sources.pybuda", "opatlas.analyze.sources.ttmetal",
                        "opatlas.analyze.sources.config", "opatlas.analyze.sources.store",
                        "opatlas.analyze.sources.trace", "opatlas.analyze.sources.saved"]


@dataclass
class ReadOptions:
    """What the command line can pass to any reader; a reader ignores what it does not use."""

    measured: Path | None = None  # a results store whose measurements replace predictions
    models: Path | None = None  # fitted models to predict with
    strict: bool = False  # a fallback is an error instead of a warning
    extra: dict[str, Any] = field(default_factory=dict)  # kind-specific (e.g. netlist, dir)


@dataclass(frozen=True)
class SourceKind:
    name: str
    detect: Callable[[Path], bool]  # cheap: looks at the name and at most the first bytes
    read: Callable[[Path, ReadOptions], Analysis]
    help: str
    uses: frozenset[str] = frozenset()  # the options it reads (ReadOptions fields, extra keys)


# the command line's name of each option a source may use
OPTION_FLAGS = {"measured": "--measured", "models": "--models", "device": "--device",
                "netlist": "--netlist", "dir": "--dir", "spatial_epochs": "--spatial-epochs",
                "start_signpost": "--start-signpost", "end_signpost": "--end-signpost",
                "ignore_signposts": "--ignore-signposts", "megatron_args": "--megatron-args",
                "gpus": "--gpus", "gpus_per_node": "--gpus-per-node", "sets": "--set",
                "analytical": "--analytical"}


_KINDS: dict[str, SourceKind] = {}


def register(kind: SourceKind) -> SourceKind:
    _KINDS[kind.name] = kind
    return kind


def kinds() -> dict[str, SourceKind]:
    """Every kind, in the order detection tries them: ``_MODULES``' order whatever order the
    modules were imported in (a program that imported the config source first would have
    had it claim PyBuda netlists), then kinds registered from elsewhere."""
    for mod in _MODULES:
        importlib.import_module(mod)
    rank = {mod: i for i, mod in enumerate(_MODULES)}
    return dict(sorted(_KINDS.items(),
                       key=lambda kv: rank.get(kv[1].read.__module__, len(rank))))


# the kinds whose input may be a folder; every other kind reads one file
FOLDER_KINDS = frozenset({"pybuda"})


def detect(path: Path) -> SourceKind:
    found = [k for k in kinds().values() if k.detect(path)]
    if found:
        return found[0]
    if not path.exists():  # a bare word: a file name without suffix, or a config's name
        raise OpatlasError(f"{path}: no such file or folder, nor a bundled config of that "
                           f"name (bundled: {', '.join(bundled_configs())})")
    if path.is_dir():
        raise OpatlasError(f"{path}: a folder, but not a PyBuda run (no *netlist.yaml nor "
                           f"perf_results/ in it) nor a Hugging Face model (no config.json "
                           f"in it), the folders opatlas analyze reads; else give one file: "
                           f"a training config, a results store (.duckdb), a profiler trace "
                           f"(.json, .json.gz) or a tt-metal CSV")
    if path.suffix == ".args":  # opatlas estimate takes them as an option, not as its config
        raise OpatlasError(f"{path}: Megatron-LM launch arguments are given as --megatron-args "
                           f"@{path} (with --gpus N for the world size), as opatlas estimate "
                           f"takes them, not as the SOURCE")
    known = ", ".join(f"{k.name} ({k.help})" for k in kinds().values())
    raise OpatlasError(f"{path}: cannot tell what this is. opatlas analyze reads: {known}. "
                       f"Name the kind with --kind if the file is one of them.")


def bundled_configs() -> list[str]:
    """The names of the configs opatlas ships, as ``opatlas estimate`` takes them: training
    configs (opatlas/data/configs/*.yml), then Hugging Face ones (opatlas/data/hf/*.json)."""
    from importlib import resources

    data = resources.files("opatlas") / "data"
    return [*sorted(p.name[:-4] for p in (data / "configs").iterdir() if p.name.endswith(".yml")),
            *sorted(p.name[:-5] for p in (data / "hf").iterdir() if p.name.endswith(".json"))]


def read(path: str | Path, kind: str | None = None,
         options: ReadOptions | None = None) -> Analysis:
    """The analysis of ``path`` (a file, a folder or a bundled config name)."""
    path = Path(path)
    if kind is None:
        k = detect(path)
    elif kind in kinds():
        k = kinds()[kind]
        _check_named_kind(path, k)
    else:
        raise OpatlasError(f"unknown --kind {kind!r}; known: {', '.join(kinds())}")
    options = options or ReadOptions()
    unused = _unused_options(k, options)
    if unused and options.strict:
        raise OpatlasError(f"{unused}; --strict refuses to ignore it")
    analysis = k.read(path, options)
    if unused:  # said, never silently ignored
        analysis.summary["notes"] = [f"{unused}: ignored",
                                     *(analysis.summary.get("notes") or [])]
    return analysis


def _check_named_kind(path: Path, k: SourceKind) -> None:
    """A folder given as a kind that reads one file is said as such (not as the reader's
    "Is a directory"); a kind that recognises the folder (a Hugging Face model's, for a
    config) reads it."""
    if path.is_dir() and k.name not in FOLDER_KINDS and not k.detect(path):
        raise OpatlasError(f"{path} is a folder, but --kind {k.name} reads one file: {k.help}")


def _unused_options(k: SourceKind, options: ReadOptions) -> str | None:
    given = [key for key in OPTION_FLAGS
             if (getattr(options, key, None) if key in ("measured", "models")
                 else options.extra.get(key))]
    unused = [OPTION_FLAGS[key] for key in given if key not in k.uses]
    if not unused:
        return None
    article = "an" if k.name[0] in "aeiou" else "a"
    return (f"{', '.join(unused)} {'does' if len(unused) == 1 else 'do'} not apply to "
            f"{article} {k.name} source")
