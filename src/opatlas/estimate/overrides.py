"""What-ifs without editing files: ``--set parallel.tp=4 --set training.micro_batch=2``.

Each item is a dotted key into the config and a YAML scalar. Keys are checked against the
config's schema here (a missing key is one clear error naming it and the keys its section
has); values are applied to the raw mapping before validation, so they are validated exactly
as if they had been written in the file.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import BaseModel

from opatlas.errors import SpecError
from opatlas.estimate.config import TrainConfig

SOURCE = "--set"
# Keys the raw config accepts beyond the validated schema: resolved before validation.
EXTRA_KEYS = {("model", "hf"), ("cluster", "preset")}


def parse_item(item: str) -> tuple[tuple[str, ...], Any]:
    """``"parallel.tp=4"`` -> (("parallel", "tp"), 4)."""
    key, sep, text = item.partition("=")
    path = tuple(p.strip() for p in key.strip().split("."))
    if not sep or not all(path):
        raise SpecError("expected KEY=VALUE with a dotted key, e.g. parallel.tp=4",
                        file=SOURCE, value=item)
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    if value is None:
        raise SpecError("the value is empty", file=SOURCE, key=".".join(path), value=item)
    return path, value


def _section_keys(model: type[BaseModel], prefix: tuple[str, ...]) -> list[str]:
    extra = [k[-1] for k in EXTRA_KEYS if k[:-1] == prefix]
    return sorted([*model.model_fields, *extra])


def check_key(path: tuple[str, ...]) -> None:
    """Raise unless ``path`` names a settable leaf of the config."""
    model: type[BaseModel] = TrainConfig
    for depth, part in enumerate(path):
        here = path[:depth + 1]
        if here in EXTRA_KEYS and depth == len(path) - 1:
            return
        fields = model.model_fields
        if part not in fields:
            where = ".".join(path[:depth]) or "the config"
            raise SpecError(f"no such key: {where} has {', '.join(_section_keys(model, path[:depth]))}",
                            file=SOURCE, key=".".join(path))
        annotation = fields[part].annotation
        nested = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        last = depth == len(path) - 1
        if nested and last:
            raise SpecError(f"{part} is a section; set one of its keys: "
                            f"{', '.join(_section_keys(annotation, here))}",
                            file=SOURCE, key=".".join(path))
        if not nested and not last:
            raise SpecError(f"{'.'.join(here)} is a value, not a section", file=SOURCE,
                            key=".".join(path))
        if nested:
            model = annotation


def apply_overrides(data: dict[str, Any], items: Sequence[str]) -> dict[str, Any]:
    """A copy of the raw config ``data`` with each ``KEY=VALUE`` of ``items`` set.

    ``cluster.preset`` is applied first and replaces the file's device, GPUs per node and
    bandwidths (the figures a preset defines); other ``--set cluster.*`` keys still win."""
    out = copy.deepcopy(data)
    parsed = [parse_item(item) for item in items]
    parsed.sort(key=lambda pv: pv[0] != ("cluster", "preset"))
    for path, value in parsed:
        check_key(path)
        if path == ("cluster", "preset") and isinstance(out.get("cluster"), dict):
            from opatlas.estimate.presets import PRESET_KEYS

            out["cluster"] = {k: v for k, v in out["cluster"].items() if k not in PRESET_KEYS}
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = value
    return out


def override_keys(items: Sequence[str]) -> set[str]:
    return {".".join(parse_item(i)[0]) for i in items}
