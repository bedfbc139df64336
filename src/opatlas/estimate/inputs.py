"""One entry point for everything ``opatlas estimate`` accepts as its run description: an
opatlas or estimate-train-time YAML, a Hugging Face ``config.json`` (or a bundled name), or
Megatron-LM launch arguments; then ``--set`` what-ifs, ``--gpus`` and ``--gpus-per-node``.
Returns the validated config with every assumption made on the way, for the caller to show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opatlas.errors import OpatlasError, SpecError
from opatlas.estimate.config import TrainConfig, read_config, validate_config
from opatlas.estimate.defaults import assumed_defaults
from opatlas.estimate.overrides import SOURCE as SET_SOURCE
from opatlas.estimate.overrides import apply_overrides, override_keys


@dataclass
class Inputs:
    """The config, notes for the user, and the run length the input itself asks for
    (Megatron's ``--train-iters``/``--train-samples``), if any."""

    config: TrainConfig
    notes: list[str] = field(default_factory=list)
    steps: int | None = None


def load_inputs(config: str | None = None, *, megatron_args: str | None = None,
                gpus: int | None = None, gpus_per_node: int | None = None,
                sets: Sequence[str] = (), search: bool = False, strict: bool = False,
                notes: list[str] | None = None) -> Inputs:
    """Build the training config from a file or Megatron arguments plus overrides.

    ``gpus`` is the world size: for Megatron arguments it sets dp = gpus / (tp·pp); for a
    config that does not fix ``parallel.dp`` (a Hugging Face one) likewise, unless ``search``
    (where it is the search's GPU count); a config whose dp·tp·pp disagrees is an error.
    ``strict``: Megatron flags that are not modelled are errors, not notes. ``notes``: a list
    to collect the assumptions in as they are made, so that a caller can show them even when
    a later step fails (an assumed batch is why a layout does not divide it).
    """
    notes = [] if notes is None else notes
    steps = None
    if megatron_args is not None:
        if config is not None:
            raise OpatlasError("give either a config or --megatron-args, not both (use --set "
                               "for the cluster, e.g. --set cluster.preset=dgx-a100)")
        raw, path, steps, gpus = _from_megatron(megatron_args, gpus, gpus_per_node, strict,
                                                notes)
    elif config is not None:
        raw, path = read_config(config, notes, strict)
    else:
        raise OpatlasError("give a config (YAML, config.json or a bundled name) or "
                           "--megatron-args")
    sets = list(sets)
    if gpus_per_node is not None:
        sets.append(f"cluster.gpus_per_node={gpus_per_node}")
    before = _layout_gpus(raw)
    raw = apply_overrides(raw, sets)
    after = _layout_gpus(raw)
    if not search and gpus is None and before and after and before != after:
        notes.append(f"--set changes the layout's GPU count from {before} to {after} "
                     f"(dp·tp·pp: --set parallel.dp too to keep the count)")
    if gpus is not None and (not search or megatron_args is not None):
        raw = _spread_gpus(raw, gpus, path, notes, quiet=megatron_args is not None)
    try:
        cfg = validate_config(raw, path, notes)
    except SpecError as exc:
        raise _blame(exc, sets) from None
    notes.extend(assumed_defaults(raw, search))
    if gpus is not None and not search and cfg.gpus != gpus:
        raise OpatlasError(f"--gpus {gpus} disagrees with the config's dp·tp·pp = "
                           f"{cfg.parallel.dp}·{cfg.parallel.tp}·{cfg.parallel.pp} = {cfg.gpus}"
                           f" (use --search to choose a layout of {gpus} GPUs)")
    return Inputs(cfg, notes, steps)


def _from_megatron(args: str, gpus: int | None, gpus_per_node: int | None, strict: bool,
                   notes: list[str]) -> tuple[dict[str, Any], Path, int | None, int]:
    """(raw config without dp, its label, the run's steps, the world size): dp is derived
    again after --set, so that a what-if on tp or pp keeps the GPU count."""
    from opatlas.estimate.megatron import megatron_config

    run = megatron_config(args, gpus, gpus_per_node, strict)
    notes.extend(run.report())
    parallel = dict(run.config["parallel"])
    world = parallel["tp"] * parallel["pp"] * parallel.pop("dp")
    path = Path(args[1:] if args.startswith("@") else "--megatron-args")
    return {**run.config, "parallel": parallel}, path, run.steps, world


def _layout_gpus(raw: dict[str, Any]) -> int | None:
    """dp·tp·pp of a raw config that gives dp, else None."""
    p = raw.get("parallel")
    if not isinstance(p, dict) or "dp" not in p:
        return None
    values = [p.get(k, 1) for k in ("dp", "tp", "pp")]
    valid = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)
    return values[0] * values[1] * values[2] if valid else None  # else validation says why


def _spread_gpus(raw: dict[str, Any], gpus: int, path: Path, notes: list[str],
                 quiet: bool = False) -> dict[str, Any]:
    """dp = gpus / (tp·pp) when the config does not fix dp itself."""
    parallel = raw.get("parallel") or {}
    if not isinstance(parallel, dict) or "dp" in parallel:
        return raw
    tp, pp = parallel.get("tp", 1), parallel.get("pp", 1)
    if not (isinstance(tp, int) and isinstance(pp, int)) or tp < 1 or pp < 1 or gpus % (tp * pp):
        raise SpecError(f"--gpus {gpus} is not a multiple of tp·pp = {tp}·{pp}", file=str(path),
                        key="parallel")
    if not quiet:
            notes.append(f"parallel.dp = --gpus / (tp·pp) = {gpus // (tp * pp)} (tp {tp}, pp {pp}; "
                     f"--set parallel.tp=... to change, or --search)")
    return {**raw, "parallel": {**parallel, "dp": gpus // (tp * pp)}}


def _blame(exc: SpecError, sets: Sequence[str]) -> SpecError:
    """Name --set when an override holds the bad value; a rule spanning keys (heads vs tp)
    names the overrides in play rather than echoing the whole config."""
    if exc.key is not None and exc.key in override_keys(sets):
        return SpecError(exc.detail, file=SET_SOURCE, key=exc.key, value=exc.value)
    if exc.key is None:  # a rule across keys (validate_config no longer echoes the mapping)
        given = f" (with --set {' --set '.join(sets)})" if sets else ""
        return SpecError(exc.detail + given, file=exc.file)
    inside = [s for s in sets if s.partition("=")[0].strip().startswith(exc.key + ".")]
    if inside:  # a rule across one section's keys (hidden vs heads), an override among them
        return SpecError(f"{exc.detail} (with --set {' --set '.join(inside)})", file=exc.file,
                         key=exc.key)
    return exc


def with_flags(cfg: TrainConfig, strict: bool, analytical: bool) -> TrainConfig:
    """``cfg`` as the ``--strict`` and ``--analytical`` flags change it (estimate, analyze):
    ops.strict; roofline ops with alpha-beta collectives (no NCCL data)."""
    if strict:
        cfg = cfg.model_copy(update={"ops": cfg.ops.model_copy(update={"strict": True})})
    if analytical:
        cfg = cfg.model_copy(update={"ops": cfg.ops.model_copy(update={"mode": "analytical"}),
                                     "cluster": cfg.cluster.model_copy(update={"nccl_data": None})})
    return cfg


def out_of_memory(est: Any) -> str | None:
    """What a layout that does not fit in memory needs, in one phrase; None when it fits (or
    the device's memory is not known)."""
    import math

    if est.fits or not math.isfinite(est.memory_limit_gib):
        return None
    return (f"the layout needs {est.memory_gib:.1f} GiB per GPU, more than the "
            f"{est.memory_limit_gib:.0f} GiB it can use (out of memory)")
