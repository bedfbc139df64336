"""Search the parallel layouts of N GPUs: every valid (dp, tp, pp, micro-batch, ZeRO stage,
recompute, schedule, and expert parallelism for MoE models), estimated in one vectorised
batch, ranked by step time; configs that do not fit in memory are dropped. Layouts with the
same step time and memory (e.g. no and selective recomputation under flash attention, which
stores no attention scores to recompute) make one row: the first in candidate order, with the
others listed as its ``equivalent`` layouts."""

from __future__ import annotations

import itertools

from pydantic import ValidationError

from opatlas.errors import OpatlasError
from opatlas.estimate.config import TrainConfig
from opatlas.estimate.engine import Estimate, estimate_many

# what the search chooses; a user may pin any of them (``--set parallel.tp=8``)
SEARCHED = ("parallel.dp", "parallel.tp", "parallel.pp", "parallel.ep", "parallel.zero",
            "parallel.recompute", "parallel.schedule", "parallel.virtual_stages",
            "parallel.sequence_parallel", "training.micro_batch")


def _value(c: TrainConfig, key: str) -> object:
    section, name = key.split(".")
    return getattr(getattr(c, section), name)


def pinned(cfg: TrainConfig, keys: set[str]) -> dict[str, object]:
    """The searched keys among ``keys`` with their values in ``cfg``."""
    return {k: _value(cfg, k) for k in SEARCHED if k in keys}


def candidates(cfg: TrainConfig, gpus: int, fixed: dict[str, object] | None = None
               ) -> list[TrainConfig]:
    """Every valid layout of ``gpus`` GPUs; with ``fixed``, only those that keep those keys'
    values."""
    fixed = fixed or {}
    return [c for c in _all_candidates(cfg, gpus)
            if all(_value(c, k) == v for k, v in fixed.items())]


def _all_candidates(cfg: TrainConfig, gpus: int) -> list[TrainConfig]:
    m, gpn = cfg.model, cfg.cluster.gpus_per_node
    powers = [2**i for i in range(12)]
    out = []
    for tp, pp in itertools.product(powers, powers):
        if tp > gpn or gpus % (tp * pp) or pp > m.layers or m.heads % tp or m.kv % tp:
            continue
        dp = gpus // (tp * pp)
        eps = [e for e in powers if e <= dp and dp % e == 0 and m.experts % e == 0] \
            if m.experts else [1]
        for mb, zero, rec, ep in itertools.product((1, 2, 4, 8), (0, 1, 2, 3),
                                                   ("none", "selective", "full"), eps):
            if cfg.training.global_batch % (dp * mb):
                continue
            nmb = cfg.training.global_batch // (dp * mb)
            schedules = [("1f1b", 1)]
            if pp > 1 and m.layers >= 2 * pp and nmb % pp == 0:
                schedules.append(("interleaved", 2))
            for sched, v in schedules:
                try:
                    out.append(TrainConfig.model_validate({
                        **cfg.model_dump(exclude={"parallel", "training"}),
                        "training": {**cfg.training.model_dump(), "micro_batch": mb},
                        "parallel": {**cfg.parallel.model_dump(), "dp": dp, "tp": tp, "pp": pp,
                                     "ep": ep,
                                     "virtual_stages": v, "schedule": sched, "zero": zero,
                                     "recompute": rec, "sequence_parallel": tp > 1}}))
                except ValidationError:
                    continue
    return out


def search(cfg: TrainConfig, gpus: int, top: int = 10, fixed: dict[str, object] | None = None
           ) -> tuple[list[Estimate], int, int]:
    """(the ``top`` fastest that fit, configs evaluated, configs that did not fit); ``fixed``:
    searched keys held at the given values."""
    cands = candidates(cfg, gpus, fixed)
    if not cands:
        held = "".join(f", {k} = {v}" for k, v in (fixed or {}).items())
        raise OpatlasError(f"no valid layout of {gpus} GPUs for this model "
                           f"({cfg.model.heads} heads, {cfg.model.layers} layers, global batch "
                           f"{cfg.training.global_batch}{held})")
    ests = estimate_many(cands)
    fits = sorted((e for e in ests if e.fits), key=lambda e: e.step_time_s)
    if not fits:
        raise OpatlasError(_none_fits(ests, gpus))
    return distinct(fits)[:top], len(ests), len(ests) - len(fits)


def _none_fits(ests: list[Estimate], gpus: int) -> str:
    """Why the search has nothing to show: the leanest layout and what it needs."""
    from opatlas.estimate.plot import layout_label

    lean = min(ests, key=lambda e: e.memory_gib)
    return (f"none of the {len(ests)} layouts of {gpus} GPUs fits in "
            f"{lean.memory_limit_gib:.0f} GiB per GPU; the leanest "
            f"({layout_label(lean.config).replace(chr(10), ' ')}) needs {lean.memory_gib:.1f} "
            f"GiB: give more GPUs (--gpus), a shorter sequence or a smaller global batch")


def _result_key(e: Estimate) -> tuple[float, float]:
    """Step time and memory to 9 significant digits: equal results computed along different
    paths differ only in the last bits of the float sums."""
    return float(f"{e.step_time_s:.9g}"), float(f"{e.memory.total:.9g}")


def distinct(estimates: list[Estimate]) -> list[Estimate]:
    """One estimate per distinct (step time, memory), in the given order; each kept estimate
    lists the configs of the later ones that tie with it in ``equivalent``."""
    kept: dict[tuple[float, float], Estimate] = {}
    for e in estimates:
        first = kept.setdefault(_result_key(e), e)
        if first is not e:
            first.equivalent.append(e.config)
    return list(kept.values())
