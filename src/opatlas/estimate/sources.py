"""Resolve the references a raw config may hold before it is validated:
``model: {hf: path/to/config.json}`` (a Hugging Face config as the model, explicit model
fields winning) and ``cluster: {preset: dgx-h100}`` (explicit cluster fields winning)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from opatlas.errors import SpecError
from opatlas.estimate.hf import bundled_hf, hf_model_name, map_hf_config, read_hf_config
from opatlas.estimate.presets import apply_preset, device_links

# Without a batch size in the input, a Hugging Face model is estimated at about 4 Mi tokens
# per optimizer step (the order of the batches Llama 3 and its peers were trained with).
DEFAULT_BATCH_TOKENS = 4 * 2**20


def _hf_path(ref: Any, base: Path) -> Path:
    if not isinstance(ref, str | Path) or not str(ref):
        raise SpecError("expected the path of a config.json or a bundled name", file=str(base),
                        key="model.hf", value=ref)
    for candidate in (Path(ref), (base.parent / ref) if base.suffix else None):
        if candidate is not None and candidate.is_dir() and (candidate / "config.json").is_file():
            return candidate / "config.json"
        if candidate is not None and candidate.is_file():
            return candidate
    found = bundled_hf(str(ref))
    if found is None:
        raise SpecError("no such Hugging Face config.json, and no bundled one of that name",
                        file=str(base), key="model.hf", value=str(ref))
    return found


def resolve_hf(data: dict[str, Any], base: Path, notes: list[str] | None) -> dict[str, Any]:
    model = data.get("model")
    if not isinstance(model, dict) or "hf" not in model:
        return data
    path = _hf_path(model["hf"], base)
    explicit = {k: v for k, v in model.items() if k != "hf"}
    seq_len = explicit.get("seq_len")
    mapped = map_hf_config(read_hf_config(path), str(path),
                           seq_len if isinstance(seq_len, int) and seq_len > 0 else None)
    label = f"bundled {path.stem}" if bundled_hf(path.stem) == path else str(path)
    if notes is not None:
        notes.extend(mapped.notes(label))
        if explicit:
            notes.append(f"{label}: given explicitly: "
                         + ", ".join(f"model.{k} = {v}" for k, v in explicit.items()))
    out = {**data, "model": {"name": hf_model_name(path), **mapped.fields, **explicit}}
    training = data.get("training")
    if training is None or (isinstance(training, dict) and "global_batch" not in training):
        seqs, why = _default_batch(out["model"]["seq_len"], data.get("parallel"), training)
        out["training"] = {**(training or {}), "global_batch": seqs}
        if notes is not None:
            notes.append(f"assumed training.global_batch = {seqs} sequences ({why} nearest 4 Mi "
                         f"tokens per step; set training.global_batch)")
    return out


def _default_batch(seq_len: int, parallel: Any, training: Any) -> tuple[int, str]:
    """About 4 Mi tokens of sequences: a power of two, or, when the layout gives dp, the
    multiple of dp · micro-batch nearest it (so that the batch divides into the layout)."""
    seqs = DEFAULT_BATCH_TOKENS / seq_len
    dp = parallel.get("dp") if isinstance(parallel, dict) else None
    micro = training.get("micro_batch", 1) if isinstance(training, dict) else 1
    if isinstance(dp, int) and isinstance(micro, int) and dp > 0 and micro > 0:
        unit = dp * micro
        return unit * max(1, round(seqs / unit)), f"the multiple of dp·micro-batch = {unit}"
    return 2 ** max(0, round(math.log2(seqs))), "the power of two"


def resolve_sources(data: dict[str, Any], base: Path, notes: list[str] | None = None
                    ) -> dict[str, Any]:
    """``data`` with ``model.hf`` and ``cluster.preset`` expanded (a new mapping)."""
    data = resolve_hf(data, base, notes)
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and "preset" in cluster:
        data = {**data, "cluster": apply_preset(cluster, str(base), notes)}
    elif isinstance(cluster, dict):
        data = {**data, "cluster": device_links(cluster, notes)}
    return data
