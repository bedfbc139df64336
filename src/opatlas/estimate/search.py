"""Search the parallel layouts of N GPUs: every valid (dp, tp, pp, micro-batch, ZeRO stage,
recompute, schedule, and expert parallelism for MoE models), estimated in one vectorised
batch, ranked by step time; configs that do not fit in memory are dropped. Layouts with the
same step time and memory (e.g. no and selective recomputation under flash attention, which
stores no attention scores to recompute) make one row: the first in candidate order, with the
others listed as its ``equivalent`` layouts. A key held fixed (``--set``) is tried at its held
value alone, whether or not the search would try that value itself (GPipe, 4 chunks, tp 3)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from opatlas.errors import OpatlasError, SpecError
from opatlas.estimate.config import (
    TrainConfig,
    ffn_split_rule,
    moe_rule,
    tokens_rule,
    tp_split_rule,
)
from opatlas.estimate.engine import Estimate, estimate_many
from opatlas.estimate.overrides import SOURCE as SET_SOURCE

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
    values (each a domain of one value, whether or not the search would try it itself)."""
    fixed = fixed or {}
    return [c for c in _all_candidates(cfg, gpus, fixed)
            if all(_value(c, k) == v for k, v in fixed.items())]


POWERS = tuple(2**i for i in range(12))


def _domain(fixed: dict[str, object], key: str, searched: Iterable[Any]) -> list[Any]:
    """What the search tries for ``key``: exactly the held value, else its own list."""
    return [fixed[key]] if key in fixed else list(searched)


def _tp_pp(cfg: TrainConfig, gpus: int, fixed: dict[str, object]) -> list[tuple[int, int, int]]:
    """(dp, tp, pp) of ``gpus`` GPUs: tp within a node and pp at most the layers unless held."""
    m, gpn = cfg.model, cfg.cluster.gpus_per_node
    out = []
    for tp, pp in itertools.product(_domain(fixed, "parallel.tp", POWERS),
                                    _domain(fixed, "parallel.pp", POWERS)):
        if tp < 1 or pp < 1 or gpus % (tp * pp) or tp_split_rule(m, tp) or pp > m.layers:
            continue
        if "parallel.tp" not in fixed and tp > gpn:
            continue
        dp = gpus // (tp * pp)
        if fixed.get("parallel.dp", dp) == dp:
            out.append((dp, tp, pp))
    return out


def _schedules(cfg: TrainConfig, pp: int, nmb: int, fixed: dict[str, object]
               ) -> list[tuple[str, int]]:
    """(schedule, virtual stages) pairs: 1F1B, and interleaved in 2 chunks where pp > 1 and
    the micro-batches and layers divide; a held schedule or chunk count is tried as given
    (GPipe only when held: it has 1F1B's bubble and keeps more activations)."""
    out = []
    for sched in _domain(fixed, "parallel.schedule", ("1f1b", "interleaved")):
        default_v = 2 if sched == "interleaved" else 1
        for v in _domain(fixed, "parallel.virtual_stages", (default_v,)):
            if sched == "interleaved" and (pp == 1 or nmb % pp or cfg.model.layers < v * pp):
                continue  # Megatron-LM's interleaved schedule needs pp > 1
            out.append((sched, v))
    return out


def _all_candidates(cfg: TrainConfig, gpus: int, fixed: dict[str, object] | None = None
                    ) -> list[TrainConfig]:
    fixed = fixed or {}
    m, batch = cfg.model, cfg.training.global_batch
    out = []
    for dp, tp, pp in _tp_pp(cfg, gpus, fixed):
        eps = [e for e in POWERS if e <= dp and dp % e == 0 and m.experts % e == 0] \
            if m.experts else [1]
        for mb, zero, rec, ep, sp in itertools.product(
                _domain(fixed, "training.micro_batch", (1, 2, 4, 8)),
                _domain(fixed, "parallel.zero", (0, 1, 2, 3)),
                _domain(fixed, "parallel.recompute", ("none", "selective", "full")),
                _domain(fixed, "parallel.ep", eps),
                _domain(fixed, "parallel.sequence_parallel", (tp > 1,))):
            if batch % (dp * mb):
                continue
            for sched, v in _schedules(cfg, pp, batch // (dp * mb), fixed):
                try:
                    out.append(TrainConfig.model_validate({
                        **cfg.model_dump(exclude={"parallel", "training"}),
                        "training": {**cfg.training.model_dump(), "micro_batch": mb},
                        "parallel": {**cfg.parallel.model_dump(), "dp": dp, "tp": tp, "pp": pp,
                                     "ep": ep, "virtual_stages": v, "schedule": sched,
                                     "zero": zero, "recompute": rec, "sequence_parallel": sp}}))
                except ValidationError:
                    continue
    return out


def search(cfg: TrainConfig, gpus: int, top: int = 10, fixed: dict[str, object] | None = None
           ) -> tuple[list[Estimate], int, int]:
    """(the ``top`` fastest that fit, configs evaluated, configs that did not fit); ``fixed``:
    searched keys held at the given values."""
    cands = candidates(cfg, gpus, fixed)
    if not cands:
        raise _no_layout(cfg, gpus, fixed or {})
    ests = estimate_many(cands)
    # fits None: memory not checked (its size unknown), which refuses no layout
    fits = sorted((e for e in ests if e.fits is not False), key=lambda e: e.step_time_s)
    if not fits:
        raise OpatlasError(_none_fits(ests, gpus))
    return distinct(fits)[:top], len(ests), len(ests) - len(fits)


def odd_part(n: int) -> int:
    """``n`` without its factors of two."""
    return n // (n & -n)


def _no_layout(cfg: TrainConfig, gpus: int, fixed: dict[str, object]) -> OpatlasError:
    """Why no layout is valid, and what would give one: a held value no layout can have is
    the --set's error, as it is without --search."""
    for key, value in fixed.items():
        if (why := _never_valid(cfg, gpus, key, value)) is not None:
            return SpecError(f"no layout of {gpus} GPUs can hold it: {why}", file=SET_SOURCE,
                             key=key, value=value)
    held = "".join(f", {k} = {v}" for k, v in fixed.items())
    batch = cfg.training.global_batch
    return OpatlasError(
        f"no valid layout of {gpus} GPUs for this model ({cfg.model.heads} heads, "
        f"{cfg.model.layers} layers, global batch {batch}{held}): "
        + (_held_conflict(cfg, gpus, fixed) or _remedy(gpus, batch, fixed)
           or _held_alone(cfg, gpus, fixed) or RULES + ("; hold fewer keys with --set"
                                                        if fixed else "")))


RULES = ("tp must divide the heads and kv heads (and fit in a node unless held), pp·virtual "
         "stages the layers, dp·micro-batch the global batch")


def _never_valid(cfg: TrainConfig, gpus: int, key: str, value: object) -> str | None:
    """Why the held ``value`` of ``key`` is invalid whatever the other keys are (a rule
    between it and the model, the batch or the GPU count alone), or None."""
    m = cfg.model
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return None  # a schedule, a recompute mode, a flag: only pairs of them conflict
    if key == "parallel.tp":
        return tp_split_rule(m, value) or ffn_split_rule(m, value)
    if key == "parallel.pp" and value > m.layers:
        return f"pp {value} exceeds the {m.layers} layers (each stage takes whole layers)"
    if key == "parallel.virtual_stages" and value > 1:
        return _chunks_rule(m.layers, value)
    if key == "parallel.ep" and value > 1:
        return _expert_rule(cfg, gpus, value)
    if key == "training.micro_batch":
        return _micro_batch_rule(cfg, value)
    return None


def _chunks_rule(layers: int, v: int) -> str | None:
    """Why ``v`` > 1 virtual stages fit no layout: the interleaved schedule they need splits
    the layers into pp·v equal chunks with pp >= 2."""
    if layers % v:
        return (f"virtual_stages {v} must divide layers {layers} (the interleaved schedule "
                f"splits them into pp·virtual_stages equal chunks)")
    if 2 * v > layers:
        return (f"virtual_stages {v} needs pp >= 2 (the interleaved schedule), so "
                f"pp·virtual_stages >= {2 * v} layers; the model has {layers}")
    return None


def _expert_rule(cfg: TrainConfig, gpus: int, ep: int) -> str | None:
    """Why expert parallelism ``ep`` > 1 is invalid for every layout, or None."""
    experts = cfg.model.experts
    if (why := moe_rule(cfg.model, ep)) is not None:
        return why
    if experts % ep:
        return f"ep {ep} must divide experts {experts}"
    if gpus % ep:  # the expert-parallel groups are formed inside data parallelism
        return f"ep {ep} must divide dp, and dp divides the {gpus} GPUs"
    return None


def _micro_batch_rule(cfg: TrainConfig, mb: int) -> str | None:
    """Why a held micro-batch is invalid for every layout, or None."""
    batch = cfg.training.global_batch
    if (why := tokens_rule(mb, cfg.model.seq_len)) is not None:
        return why
    if batch % mb:  # dp is a power of two unless held: the nearest batch dp·mb divides
        near = mb * 2 ** max(0, round(math.log2(batch / mb)))
        return (f"micro_batch {mb} must divide global_batch {batch} (dp·micro_batch must); "
                f"--set training.global_batch={near}, or a micro-batch that divides {batch}")
    return None


def _held_conflict(cfg: TrainConfig, gpus: int, fixed: dict[str, object]) -> str | None:
    """Held values that no layout of ``gpus`` GPUs can have together: dp·tp·pp against the
    GPUs, a schedule against its chunks or pp."""
    held = {k.removeprefix("parallel."): v for k, v in fixed.items()
            if k in ("parallel.dp", "parallel.tp", "parallel.pp") and isinstance(v, int)}
    if gpus % math.prod(held.values()):
        return (" · ".join(f"{k} {v}" for k, v in held.items())
                + f" does not divide {gpus} GPUs (dp·tp·pp = GPUs): change --set or --gpus")
    return _schedule_conflict(fixed)


def _held_alone(cfg: TrainConfig, gpus: int, fixed: dict[str, object]) -> str | None:
    """A held value that no layout the search builds has even with the other keys free (dp 1
    of 512 GPUs: tp within a node times pp within the layers is too few), where layouts
    without it exist."""
    alone = [k for k in fixed if not candidates(cfg, gpus, {k: fixed[k]})]
    if not alone or not candidates(cfg, gpus):
        return None
    return (f"no layout the search builds holds --set {_shown(alone[0], fixed)} even on its "
            f"own ({RULES}): change or drop that --set")


def _schedule_conflict(fixed: dict[str, object]) -> str | None:
    """Two held values of the pipeline schedule that no layout can have together."""
    sched, v, pp = (fixed.get(f"parallel.{k}") for k in ("schedule", "virtual_stages", "pp"))
    if sched is None or (v is None and pp is None):
        return None
    one_chunk = ("parallel.schedule", "parallel.virtual_stages")
    if sched == "interleaved" and v == 1:
        why, pair = "the interleaved schedule needs virtual_stages >= 2", one_chunk
    elif sched != "interleaved" and isinstance(v, int) and v > 1:
        why, pair = f"virtual_stages {v} needs schedule: interleaved ({sched} runs one chunk)", \
            one_chunk
    elif sched == "interleaved" and pp == 1:
        why, pair = "Megatron-LM's interleaved schedule needs pp > 1", ("parallel.schedule",
                                                                       "parallel.pp")
    else:
        return None
    return f"{why}: --set {' and --set '.join(_shown(k, fixed) for k in pair)} cannot both hold"


def _shown(key: str, fixed: dict[str, object]) -> str:
    """``key=value`` as --set writes it."""
    value = fixed[key]
    return f"{key}={str(value).lower() if isinstance(value, bool) else value}"


def _remedy(gpus: int, batch: int, fixed: dict[str, object]) -> str | None:
    """The batch, or the GPU count, that lets dp·micro-batch divide the batch, where that is
    what breaks."""
    held = {k: v for k, v in fixed.items() if isinstance(v, int) and v > 0}
    if "parallel.dp" in held:
        unit = held["parallel.dp"] * held.get("training.micro_batch", 1)
        whose, other = "dp·micro-batch", f"a held dp·micro-batch that divides {batch}"
    else:  # tp and pp are powers of two unless held: dp keeps the rest of the GPU count
        split = math.prod(odd_part(held.get(k, 1)) for k in ("parallel.tp", "parallel.pp"))
        unit = odd_part(gpus) // math.gcd(odd_part(gpus), split) \
            * odd_part(held.get("training.micro_batch", 1))
        whose = (f"the odd factor dp·micro-batch takes on {gpus} GPUs (the searched tp and "
                 f"pp are powers of two)")
        low = 2 ** int(math.log2(gpus))
        other = f"a GPU count whose dp divides {batch} (e.g. --gpus {low} or {2 * low})"
    if unit > 1 and batch % unit:
        near = unit * 2 ** max(0, round(math.log2(batch / unit)))
        return (f"the batch is not a multiple of {unit}, {whose}: --set "
                f"training.global_batch={near}, or {other}")
    return None


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
