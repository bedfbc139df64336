"""Cluster presets: ``cluster: {preset: dgx-h100}`` fills the device, GPUs per node and the
per-GPU link bandwidths from the vendors' datasheets; fields written next to the preset
override it.

Bandwidths are per GPU and per direction, in GB/s, as ``ClusterConfig`` takes them. NVLink
figures on datasheets are bidirectional totals per GPU (halved here); network figures are the
line rate of the one compute-fabric NIC each GPU has (Gb/s ÷ 8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opatlas.errors import SpecError

PRESET_KEYS = ("device", "gpus_per_node", "intra_bw_gbps", "inter_bw_gbps")


@dataclass(frozen=True)
class Preset:
    device: str
    gpus_per_node: int
    intra_bw_gbps: float
    inter_bw_gbps: float
    source: str

    def fields(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in PRESET_KEYS}


PRESETS: dict[str, Preset] = {
    "dgx-a100": Preset(
        "A100-SXM4-80GB", 8, 300.0, 25.0,
        "NVIDIA DGX A100 datasheet: 8 A100 80GB, third-generation NVLink at 600 GB/s per GPU "
        "(bidirectional) through NVSwitch; 8 single-port ConnectX-6 VPI for the compute fabric, "
        "200 Gb/s each (one per GPU)"),
    "dgx-h100": Preset(
        "H100-SXM5-80GB", 8, 450.0, 50.0,
        "NVIDIA DGX H100 datasheet: 8 H100 SXM5 80GB, fourth-generation NVLink at 900 GB/s per "
        "GPU (bidirectional) through 4 NVSwitches; 8 ConnectX-7 (OSFP) at 400 Gb/s, one per GPU"),
    "dgx-b200": Preset(
        "B200-SXM-180GB", 8, 900.0, 50.0,
        "NVIDIA DGX B200 datasheet: 8 B200 (1,440 GB in all), fifth-generation NVLink at "
        "1.8 TB/s per GPU (bidirectional, 14.4 TB/s in all); 8 single-port ConnectX-7 VPI at "
        "400 Gb/s, one per GPU"),
    "gb200-nvl72": Preset(
        "GB200-186GB", 72, 900.0, 50.0,
        "NVIDIA GB200 NVL72 datasheet: 72 Blackwell GPUs in one NVLink domain, fifth-generation "
        "NVLink at 1.8 TB/s per GPU (130 TB/s in all); the DGX GB200 reference architecture's "
        "compute fabric gives each GPU one 400 Gb/s ConnectX-7"),
}


def apply_preset(cluster: dict[str, Any], file: str | None = None,
                 notes: list[str] | None = None) -> dict[str, Any]:
    """``cluster`` with its ``preset`` expanded; explicit fields win."""
    if "preset" not in cluster:
        return cluster
    explicit = {k: v for k, v in cluster.items() if k != "preset"}
    name = cluster["preset"]
    preset = PRESETS.get(str(name).lower())
    if preset is None:
        raise SpecError(f"unknown cluster preset; known: {', '.join(PRESETS)}", file=file,
                        key="cluster.preset", value=name)
    if notes is not None:
        notes.append(_preset_note(str(name), preset, explicit))
    return {**preset.fields(), **explicit}


def _preset_note(name: str, preset: Preset, explicit: dict[str, Any]) -> str:
    """What the preset filled, and the values given next to it that it did not replace
    (a Megatron launcher's GPUs per node among them)."""
    def listed(fields: dict[str, Any]) -> str:
        return ", ".join(f"{k} = {v}" for k, v in fields.items())

    kept = {k: v for k, v in preset.fields().items() if k not in explicit}
    given = f" (given explicitly: {listed(explicit)})" if explicit else ""
    return f"cluster preset {name}: {listed(kept)}{given} — {preset.source}"


LINK_KEYS = ("intra_bw_gbps", "inter_bw_gbps")


def preset_for_device(device: Any) -> tuple[str, Preset] | None:
    """The preset built around ``device`` (any name the catalog resolves to the same GPU)."""
    from opatlas.devices import find_device

    wanted = find_device(str(device).replace(" ", ""))
    if wanted is None:
        return None
    for name, preset in PRESETS.items():
        if find_device(preset.device) is wanted:
            return name, preset
    return None


# what a links note adds when the config has measured NCCL data (``--analytical`` drops it)
BESIDE_NCCL_DATA = ("; beside the measured NCCL data, for the collectives it does not cover "
                    "and for bounds")


def device_links(cluster: dict[str, Any], notes: list[str] | None = None) -> dict[str, Any]:
    """``cluster`` naming a device but not its links: the links of that GPU's own system (the
    A100's DGX A100 ...), said in a note, instead of the defaults (an H100's). With measured
    NCCL data they still matter: they time the collectives the data does not cover, and
    bound every collective (``opatlas analyze``)."""
    missing = [k for k in LINK_KEYS if k not in cluster]
    if "device" not in cluster or "preset" in cluster or not missing:
        return cluster
    found = preset_for_device(cluster["device"])
    if found is None:
        return cluster
    name, preset = found
    links = {k: getattr(preset, k) for k in missing}
    if notes is not None:
        notes.append(f"cluster links of the {cluster['device']}'s own system ({name} preset): "
                     + ", ".join(f"cluster.{k} = {v}" for k, v in links.items())
                     + (BESIDE_NCCL_DATA if cluster.get("nccl_data") else "")
                     + "; --set cluster.KEY=VALUE to change")
    return {**cluster, **links}
