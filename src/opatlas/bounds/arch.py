"""Multi-level spatial accelerator descriptions for the mapper (``opatlas bound accel``).

An architecture is a list of levels, outermost first. The first is the backing store (DRAM,
unbounded, keeps every tensor). A ``memory`` level has a capacity and keeps some tensors,
bypassing the others; unless ``temporal: false`` it owns one temporal loop per rank. A
``spatial`` level fans the rest of the nest out over identical children, one fan-out per
``dims`` entry; a dim with ``reuse: T`` may only unroll ranks that tensor T does not use
(T is shared, or reduced, across that fan-out). Sources of the numbers go in ``sources``.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from opatlas.errors import SpecError


class SpatialDim(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    fanout: int = Field(ge=1)
    reuse: str | None = None


class Level(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    kind: Literal["memory", "spatial"]
    size_bytes: float | None = Field(default=None, gt=0)
    keeps: list[str] = []
    temporal: bool = True
    bits: dict[str, int] = {}
    dims: list[SpatialDim] = []
    sources: dict[str, str] = {}

    @model_validator(mode="after")
    def _kind_fields(self) -> Level:
        if self.kind == "spatial" and not self.dims:
            raise ValueError(f"spatial level {self.name!r} needs 'dims' (its fan-outs)")
        if self.kind == "memory" and self.dims:
            raise ValueError(f"memory level {self.name!r} cannot have 'dims'")
        return self


class Arch(BaseModel):
    """A validated architecture; see the module docstring for the format."""

    model_config = ConfigDict(extra="forbid")
    name: str
    word_bits: int = Field(default=8, ge=1)
    levels: list[Level]
    sources: dict[str, str] = {}
    _file: str | None = PrivateAttr(default=None)  # the YAML it was loaded from, for errors

    @model_validator(mode="after")
    def _structure(self) -> Arch:
        names = [lv.name for lv in self.levels]
        if len(set(names)) != len(names):
            raise ValueError(f"level names must be unique, got {names}")
        if not self.levels or self.levels[0].kind != "memory":
            raise ValueError("the first level must be the backing-store memory (DRAM)")
        if self.levels[0].size_bytes is not None:
            raise ValueError("the backing store (first level) is unbounded: leave out size_bytes")
        if not self.levels[0].temporal:
            raise ValueError("the backing store (first level) must own temporal loops")
        for lv in self.levels[1:]:
            if lv.kind == "memory" and lv.size_bytes is None:
                raise ValueError(f"on-chip memory level {lv.name!r} needs size_bytes")
        return self

    @property
    def file(self) -> str | None:
        """The YAML file this architecture was loaded from (``None`` if built in code)."""
        return self._file

    @property
    def described(self) -> str:
        """``architecture 'name' (file F)``, for messages about an option's value."""
        return f"architecture {self.name!r}" + (f" (file {self._file})" if self._file else "")

    def error(self, message: str, *, key: str | None = None, value: object = None) -> SpecError:
        """An error in this architecture, naming its file (or, built in code, its name)."""
        if self._file is None:
            message = f"architecture {self.name!r}: {message}"
        return SpecError(message, file=self._file, key=key, value=value)

    @property
    def macs(self) -> int:
        """Compute units: the product of every spatial fan-out."""
        return math.prod(d.fanout for lv in self.levels if lv.kind == "spatial" for d in lv.dims)

    def level(self, name: str) -> Level:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise SpecError(f"no level of that name in {self.described}; "
                        f"its levels: {', '.join(lv.name for lv in self.levels)}", key="level",
                        value=name)

    def with_size(self, name: str, size_bytes: float) -> Arch:
        """A copy with one memory level resized (the artifact's GlobalBuffer sweep)."""
        lv = self.level(name)
        if lv.kind != "memory" or lv is self.levels[0]:
            raise SpecError(f"only an on-chip memory level of {self.described} can be "
                            f"resized", key="level", value=name)
        levels = [x.model_copy(update={"size_bytes": size_bytes}) if x.name == name else x
                  for x in self.levels]
        return self.model_copy(update={"levels": levels})

    def check_tensors(self, tensors: list[str]) -> None:
        """Every tensor kept by the backing store and by some on-chip level; no unknown names."""
        known = set(tensors)
        for i, lv in enumerate(self.levels):
            refs = list(lv.keeps) + list(lv.bits) + [d.reuse for d in lv.dims if d.reuse]
            bad = [t for t in refs if t not in known]
            if bad:
                raise self.error(f"level {lv.name!r} names tensor(s) {bad} that the problem "
                                 f"does not have (it has {sorted(known)})", key=f"levels.{i}",
                                 value=lv.name)
        missing = known - set(self.levels[0].keeps)
        if missing:
            raise self.error(f"the backing store must keep every tensor; it lacks "
                             f"{sorted(missing)}", key="levels.0.keeps",
                             value=self.levels[0].keeps)
        for t in tensors:
            if not any(t in lv.keeps for lv in self.levels[1:]):
                raise self.error(f"no on-chip level keeps tensor {t!r}", key="levels")


BUILTIN = ("simba",)


def load_arch(source: str | Path) -> Arch:
    """Load an architecture YAML, or a built-in by name (``simba``)."""
    if str(source) in BUILTIN:
        ref = resources.files("opatlas") / "data" / "arches" / f"{source}.yaml"
        arch = _parse(ref.read_text(), f"built-in architecture {source!r}")
        arch._file = str(ref)  # later errors (a problem's tensors) point at the bundled YAML
        return arch
    path = Path(source)
    if not path.is_file():
        raise SpecError(f"no such architecture file, and no built-in of that name "
                        f"(built-ins: {', '.join(BUILTIN)})", file=str(source))
    arch = _parse(path.read_text(), str(path))
    arch._file = str(path)  # errors found later (against the problem) name the file too
    return arch


def _parse(text: str, file: str) -> Arch:
    from opatlas.spec.loader import spec_error
    from opatlas.yaml_io import load_yaml

    data = load_yaml(text, file)  # a key given twice is an error, as in every user file
    if not isinstance(data, dict):
        raise SpecError("an architecture must be a YAML mapping at the top level", file=file)
    try:
        return Arch.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, data, file) from None
