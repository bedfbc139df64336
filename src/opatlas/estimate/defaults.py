"""What a config leaves to the defaults, said in one line per section: a Hugging Face file
alone names a model, and everything else (the GPU, its links, the layout, how ops are timed)
is then assumed. A section the input writes in full, or one the search chooses, says nothing."""

from __future__ import annotations

from typing import Any

from opatlas.estimate.config import ClusterConfig, OpsConfig, ParallelConfig, TrainingConfig
from opatlas.estimate.presets import preset_for_device

# the keys worth naming when they come from the defaults, and how to change them
_SECTIONS: dict[str, tuple[type, tuple[str, ...], str]] = {
    "training": (TrainingConfig, ("dtype", "micro_batch"), "--set training.KEY=VALUE"),
    "parallel": (ParallelConfig, ("dp", "tp", "pp", "zero", "recompute"),
                 "--set parallel.KEY=VALUE, or --search --gpus N"),
    "cluster": (ClusterConfig, ("device", "gpus_per_node", "intra_bw_gbps", "inter_bw_gbps"),
                "--set cluster.preset=dgx-a100|dgx-h100|..., or cluster.KEY=VALUE"),
    "ops": (OpsConfig, ("mode", "compute_efficiency", "memory_efficiency"),
            "--set ops.KEY=VALUE (ops.mode=data for measured op models)"),
}
_SEARCHED = {"parallel": None, "training": {"micro_batch"}}  # None: the whole section


def assumed_defaults(raw: dict[str, Any], search: bool = False) -> list[str]:
    """One note per section whose listed keys ``raw`` does not give."""
    notes = []
    for section, (model, keys, how) in _SECTIONS.items():
        given = raw.get(section)
        given = given if isinstance(given, dict) else {}
        if section == "cluster" and "preset" in given:
            continue  # the preset says what it filled
        missing = [k for k in keys if k not in given]
        if section == "ops" and given.get("mode", model.model_fields["mode"].default) == "data":
            missing = [k for k in missing if k == "mode"]  # efficiencies only shape the roofline
        if section == "cluster" and (given.get("nccl_data") or (
                "device" in given and preset_for_device(given["device"]) is not None)):
            # measured instead, or the device's own system's links (said by device_links)
            missing = [k for k in missing if not k.endswith("_bw_gbps")]
        if search and section in _SEARCHED:
            searched = _SEARCHED[section]
            missing = [] if searched is None else [k for k in missing if k not in searched]
        if missing:
            values = ", ".join(f"{section}.{k} = {model.model_fields[k].default}" for k in missing)
            notes.append(f"assumed (the defaults) {values}; {how}")
    return notes
