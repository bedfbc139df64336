"""Resolve the references a raw config may hold before it is validated:
``model: {hf: path/to/config.json}`` (a Hugging Face config as the model, explicit model
fields winning) and ``cluster: {preset: dgx-h100}`` (explicit cluster fields winning)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from opatlas.errors import SpecError
from opatlas.estimate.hf import (
    bundled_hf,
    check_positions,
    hf_model_name,
    map_hf_config,
    read_hf_config,
)
from opatlas.estimate.presets import apply_preset, device_links

# Without a batch size in the input, a Hugging Face model is estimated at about 4 Mi tokens
# per optimizer step (the order of the batches Llama 3 and its peers were trained with).
DEFAULT_BATCH_TOKENS = 4 * 2**20
FOLDER_HOLDS = "a Hugging Face model folder holds one"


def _hf_path(ref: Any, base: Path) -> Path:
    if not isinstance(ref, str | Path) or not str(ref):
        raise SpecError("expected the path of a config.json or a bundled name", file=str(base),
                        key="model.hf", value=ref)
    candidates = [Path(ref), *([base.parent / ref] if base.suffix else [])]
    for candidate in candidates:
        if candidate.is_dir() and (candidate / "config.json").is_file():
            return candidate / "config.json"
        if candidate.is_file():
            return candidate
    found = bundled_hf(str(ref))
    if found is None and any(c.is_dir() for c in candidates):
        raise SpecError(f"a folder without config.json ({FOLDER_HOLDS})", file=str(base),
                        key="model.hf", value=str(ref))
    if found is None:
        raise SpecError("no such Hugging Face config.json, and no bundled one of that name",
                        file=str(base), key="model.hf", value=str(ref))
    return found


def resolve_hf(data: dict[str, Any], base: Path, notes: list[str] | None,
               gpus: int | None = None) -> dict[str, Any]:
    """``data`` with ``model.hf`` read; ``gpus``: the GPU count a search lays out, which an
    assumed batch is made divisible by (see ``_default_batch``)."""
    model = data.get("model")
    if not isinstance(model, dict) or "hf" not in model:
        return data
    path = _hf_path(model["hf"], base)
    explicit = {k: v for k, v in model.items() if k != "hf"}
    seq_len = _seq_len(explicit["seq_len"], base) if "seq_len" in explicit else None
    mapped = map_hf_config(read_hf_config(path), str(path), seq_len)
    label = f"bundled {path.stem}" if bundled_hf(path.stem) == path else str(path)
    if notes is not None:
        notes.extend(mapped.notes(label, frozenset(f"model.{k}" for k in explicit)))
        if explicit:
            notes.append(f"{label}: given explicitly: "
                         + ", ".join(f"model.{k} = {v}" for k, v in explicit.items()))
    out = {**data, "model": {"name": hf_model_name(path), **mapped.fields, **explicit}}
    seq_len = mapped.fields["seq_len"]  # the explicit one if given, checked
    check_positions(mapped, seq_len, out["model"].get("learned_positions"), str(path))
    training = data.get("training")
    if training is None or (isinstance(training, dict) and "global_batch" not in training):
        seqs, why = _default_batch(seq_len, data.get("parallel"), training, gpus)
        out["training"] = {**(training or {}), "global_batch": seqs}
        if notes is not None:
            notes.append(f"assumed training.global_batch = {seqs} sequences ({why} nearest 4 Mi "
                         f"tokens per step; set training.global_batch)")
    return out


def _seq_len(value: Any, base: Path) -> int:
    """An explicit ``model.seq_len`` checked as validation will check it, since mapping the
    model and assuming a batch compute with it first (a 0 or "4k" is named, not divided by)."""
    from pydantic import TypeAdapter, ValidationError

    from opatlas.estimate.config import ModelConfig

    if isinstance(value, bool):  # as validation says it (pydantic would take it for 1 or 0)
        raise SpecError(f"expected a number, not {str(value).lower()}", file=str(base),
                        key="model.seq_len", value=value)
    field = ModelConfig.model_fields["seq_len"]
    try:
        return TypeAdapter(Annotated[int, *field.metadata]).validate_python(value)
    except ValidationError as exc:
        raise SpecError(exc.errors()[0]["msg"], file=str(base), key="model.seq_len",
                        value=value) from None


def _default_batch(seq_len: int, parallel: Any, training: Any, gpus: int | None = None
                   ) -> tuple[int, str]:
    """About 4 Mi tokens of sequences: when the layout gives dp, the multiple of dp ·
    micro-batch nearest it (so that the batch divides into the layout); else a power of two,
    times the odd factor of ``gpus`` when a search lays them out (its tp and pp are powers of
    two, so dp carries that factor and must divide the batch)."""
    seqs = DEFAULT_BATCH_TOKENS / seq_len
    dp = parallel.get("dp") if isinstance(parallel, dict) else None
    micro = training.get("micro_batch", 1) if isinstance(training, dict) else 1
    if not (isinstance(micro, int) and micro > 0):
        micro = 1  # validation says why
    if isinstance(dp, int) and dp > 0:
        unit = dp * micro
        return unit * max(1, round(seqs / unit)), f"the multiple of dp·micro-batch = {unit}"
    if not (isinstance(gpus, int) and gpus > 0):
        return 2 ** max(0, round(math.log2(seqs))), "the power of two"
    odd = _odd_part(gpus) * _odd_part(micro)  # dp's and micro-batch's, multiplied
    power = 2 ** max(0, round(math.log2(seqs / odd)))
    if odd == 1:
        return power, "the power of two"
    of = f"{gpus} GPUs" + (f" times micro-batch {micro}" if _odd_part(micro) > 1 else "")
    return odd * power, (f"{odd} × {power}: {odd}, the odd factor of {of}, which "
                         f"dp·micro-batch carries, times the power of two that brings it")


def _odd_part(n: Any) -> int:
    """``n`` without its factors of two (1 for anything but a positive int)."""
    return n // (n & -n) if isinstance(n, int) and n > 0 else 1


def resolve_sources(data: dict[str, Any], base: Path, notes: list[str] | None = None,
                    gpus: int | None = None) -> dict[str, Any]:
    """``data`` with ``model.hf`` and ``cluster.preset`` expanded (a new mapping); ``gpus``:
    the GPU count a search lays out (an assumed batch divides into it)."""
    data = resolve_hf(data, base, notes, gpus)
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and "preset" in cluster:
        data = {**data, "cluster": apply_preset(cluster, str(base), notes)}
    elif isinstance(cluster, dict):
        data = {**data, "cluster": device_links(cluster, notes)}
    return data
