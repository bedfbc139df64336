"""Compose op and collective times into the time of one optimizer step.

Per micro-batch, the slowest pipeline device runs its layers forward and backward (backward
includes the recomputed forward: the whole layer under full recomputation, the unfused
attention core under selective), the tensor-parallel collectives of
each layer, the expert-parallel all-to-alls of a MoE layer, the embedding (first device) or
head and loss (last device), and the point-to-point sends to its neighbours. The schedule adds
the bubble: m·t·(1 + (p−1)/(v·m)). Data-parallel gradient reduction (per ZeRO stage, in
buckets, optionally overlapped with the last backward; experts' gradients over the dp/ep ranks
that hold them) and the optimizer step follow. With expert parallelism each rank computes its
experts' share of every rank's tokens: on average the same FLOPs as without it (perfect
balance assumed; the larger per-expert GEMMs' better efficiency is not modelled). Op times
for all configs are predicted in one batch per op.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opatlas.columns import Columns, as_columns
from opatlas.estimate import model as pm
from opatlas.estimate.comm import AlphaBeta, Measured, take_fallback_note
from opatlas.estimate.config import ModelConfig, ParallelConfig, TrainConfig
from opatlas.estimate.items import OpTerm, StepItem, breakdown_of, comm_item, op_items
from opatlas.estimate.memory import Memory, activation_bytes_per_layer, model_state_bytes
from opatlas.estimate.optimes import op_times
from opatlas.estimate.optimizer_step import passes_bytes, step_over_adam
from opatlas.estimate.pipeline import Schedule, partition_layers

GiB = 2**30
RESERVED_BYTES = 2.0 * GiB  # CUDA context, workspaces, fragmentation


@dataclass
class Estimate:
    config: TrainConfig
    step_time_s: float
    breakdown: dict[str, float]
    tokens_per_s: float
    mfu: float
    memory: Memory
    memory_limit_gib: float
    stages: list[int]
    notes: list[str] = field(default_factory=list)
    items: list[StepItem] = field(default_factory=list)  # the step, row by row (items.py)
    equivalent: list[TrainConfig] = field(default_factory=list)  # same time and memory (search)
    # what measured data fell back from (ops.mode data, NCCL data): the "op/pass" names the
    # roofline timed, and whether the alpha-beta model timed some collective
    roofline_ops: frozenset[str] = frozenset()
    alpha_beta_collectives: bool = False
    memory_stage: int = 0  # the pipeline stage whose memory ``memory`` is: the fullest

    @property
    def memory_gib(self) -> float:
        return self.memory.total / GiB

    @property
    def fits(self) -> bool | None:
        """Whether the fullest stage's memory is within the limit; None when it was not
        checked (a device known only from its data, whose memory size nothing states)."""
        if not math.isfinite(self.memory_limit_gib):
            return None
        return self.memory_gib <= self.memory_limit_gib

    def as_json(self) -> dict[str, Any]:
        out = {"model": self.config.model.name, "gpus": self.config.gpus,
               "parallel": layout_json(self.config),
               "step_time_s": self.step_time_s, "breakdown": self.breakdown,
               "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
               "memory_gib": self.memory_gib,
               # null for a device outside the catalog, whose memory size nothing states
               "memory_limit_gib": (self.memory_limit_gib if math.isfinite(self.memory_limit_gib)
                                    else None),
               "memory_breakdown_gib": {k: v / GiB for k, v in vars(self.memory).items()},
               "memory_stage": self.memory_stage,
               "fits": self.fits, "layers_per_stage": self.stages, "notes": self.notes,
               "items": [it.as_json() for it in self.items]}
        if self.equivalent:
            out["equivalent"] = [layout_json(c) for c in self.equivalent]
        return out


def layout_json(c: TrainConfig) -> dict[str, Any]:
    """The parallel layout of a config, as ``--json`` reports it."""
    p = c.parallel
    return {"dp": p.dp, "tp": p.tp, "pp": p.pp, "ep": p.ep, "virtual_stages": p.virtual_stages,
            "schedule": p.schedule, "micro_batch": c.training.micro_batch,
            "micro_batches": c.micro_batches, "zero": p.zero, "recompute": p.recompute,
            "sequence_parallel": p.sequence_parallel}


UNFUSED_ATTENTION = ("baddbmm", "ScaledUpperTriangMaskedSoftmax", "bmm")
DROPOUT = "attention_dropout"  # Megatron-LM's dropout over the probabilities (unfused)
# the layer ops on the hidden state that sequence parallelism splits along the sequence
SEQUENCE_SPLIT = ("RMSlayernorm", "layernorm", "res_add", "bias_dropout_add")


def attention_ops(m: ModelConfig) -> list[tuple[str, dict[str, Any], int]]:
    """The attention core of one layer: one flash kernel, or Megatron-LM's unfused sequence of
    scores (baddbmm of Q·Kᵀ, scaled by 1/√d), the scaled causal-masked softmax and the
    probabilities times V (bmm). Unfused attention repeats grouped K/V heads to all heads
    before the matmuls, so its shapes take every query head."""
    if m.attention == "flash":
        return [("flash_atten", {"kv_heads": m.kv}, 1)]
    return [(op, {}, 1) for op in UNFUSED_ATTENTION]


def _recomputed(c: TrainConfig, op: str) -> bool:
    """Whether a layer op's forward runs again in the backward: every op under full
    recomputation; under selective recomputation the attention core whose a·s² scores were
    not kept (Korthikanti et al. 2022, section 5): the unfused baddbmm, softmax and bmm. A
    flash kernel keeps no scores, and recomputes its own tiles inside its backward."""
    rec = c.parallel.recompute
    return rec == "full" or (rec == "selective" and op in (*UNFUSED_ATTENTION, DROPOUT))


def _layer_ops(cfg: TrainConfig) -> list[tuple[str, dict[str, Any], int]]:
    """(op, extra shape parameters, count) of one transformer layer."""
    m = cfg.model
    norm = "RMSlayernorm" if m.norm == "rmsnorm" else "layernorm"
    ops: list[tuple[str, dict[str, Any], int]] = [
        (norm, {}, 2), ("linear1", {"kv_heads": m.kv}, 1), *_qk_norm_ops(m, norm),
        *attention_ops(m), ("linear2", {}, 1), *_residual_ops(m)]
    if m.rope:  # on q and on k: one row of two calls when k has as many heads as q
        ops += [("RoPE", {}, 2)] if m.kv == m.heads else \
            [("RoPE", {}, 1), ("RoPE", {"h": m.kv, "dim": m.kv * m.hd}, 1)]
    f = m.ffn_width
    if m.experts:
        ops.append(("moe", {"experts": m.experts, "top_k": m.top_k, "ffn": f,
                            "gated": int(m.ffn_kind == "swiglu")}, 1))
    elif m.ffn_kind == "swiglu":
        ops += [("linear3", {"ffn": 2 * f}, 1), ("swiglu", {"ffn": f}, 1), ("linear4", {"ffn": f}, 1)]
    else:
        ops += [("linear3", {"ffn": f}, 1), ("gelu", {"ffn": f}, 1), ("linear4", {"ffn": f}, 1)]
    return ops


def _residual_ops(m: ModelConfig) -> list[tuple[str, dict[str, Any], int]]:
    """The layer's two residual adds, after the attention's and after the FFN's output
    projection: upstream's measured add; or, when those projections have biases or the hidden
    state a dropout, Megatron-LM's fused bias-dropout-add, which also writes the dropout mask
    and, backward, computes the dropout's and the bias's gradients."""
    biases = (m.bias, m.bias if m.mlp_bias is None else m.mlp_bias)
    if not (any(biases) or m.hidden_dropout > 0):
        return [("res_add", {}, 2)]
    ops = [("bias_dropout_add", {"p": m.hidden_dropout, "bias": int(b)}, 1) for b in biases]
    return [(ops[0][0], ops[0][1], 2)] if biases[0] == biases[1] else ops


def _qk_norm_ops(m: ModelConfig, norm: str) -> list[tuple[str, dict[str, Any], int]]:
    """The query and key norms (``model.qk_norm``), never split by sequence parallelism (the
    attention's tensors are split by heads). ``head``: rows of ``head_dim`` for every token
    and head of a rank. ``full``: a row per token over the rank's query heads, one over its
    key heads (each rank normalises its 1/tp of the width; the cross-rank sum of squares,
    one number a token, is not counted)."""
    if not m.qk_norm:
        return []
    if m.qk_norm == "full":
        def width(heads: int) -> Any:
            return lambda c: heads * m.hd // c.parallel.tp

        return [(norm, {"l": m.seq_len, "dim": width(m.heads)}, 1),
                (norm, {"l": m.seq_len, "dim": width(m.kv)}, 1)]

    def rows(heads: int) -> Any:
        return lambda c: m.seq_len * heads // c.parallel.tp

    if m.kv == m.heads:  # as many key heads as query heads: one row of two calls
        return [(norm, {"l": rows(m.heads), "dim": m.hd}, 2)]
    return [(norm, {"l": rows(m.heads), "dim": m.hd}, 1),
            (norm, {"l": rows(m.kv), "dim": m.hd}, 1)]


def _shapes(cfgs: list[TrainConfig], extra: dict[str, Any],
            seq_split: bool) -> tuple[Columns, list[dict[str, Any]]]:
    """Each config's shape of one op; an ``extra`` value may be a function of the config."""
    rows = []
    for c in cfgs:
        m, p = c.model, c.parallel
        seq = m.seq_len // p.tp if (seq_split and p.sequence_parallel) else m.seq_len
        rows.append({"mp": p.tp, "b": c.training.micro_batch, "h": m.heads, "l": seq,
                     "dim": m.hidden, **m.head_dim_shape,
                     **{k: v(c) if callable(v) else v for k, v in extra.items()}})
    # the model's whole shape beside each op's own, for timing only: data measured on whole
    # models (the catalog sweep's linear, over tied dim/heads/ffn/vocab) is predicted at the
    # model's values; data without such a column (upstream's linear1) ignores it
    whole = [{"kv_heads": c.model.kv, "ffn": c.model.ffn_width, "vocab": c.model.vocab, **r}
             for c, r in zip(cfgs, rows, strict=True)]
    return as_columns(whole), rows


def _op_terms(fn: Any, cfgs: list[TrainConfig]) -> list[list[OpTerm]]:
    """Per config, every op of a layer, of the embedding and of the head, timed in one batch
    per op for all configs."""
    m = cfgs[0].model
    norm = "RMSlayernorm" if m.norm == "rmsnorm" else "layernorm"
    plan = [("layer", op, extra, count, op in SEQUENCE_SPLIT)
            for op, extra, count in _layer_ops(cfgs[0])]
    plan += [("embedding", "embedding", {"vocab": m.vocab}, 1, False),
             ("head", norm, {}, 1, True),
             ("head", "linear_final", {"vocab": m.vocab}, 1, False),
             ("head", "parallel_cross_entropy_128", {"vocab": m.vocab}, 1, False)]
    terms: list[list[OpTerm]] = [[] for _ in cfgs]
    for where, op, extra, count, seq_split in plan:
        frame, rows = _shapes(cfgs, extra, seq_split)
        f, b = fn(op, frame, "fwd"), fn(op, frame, "bwd")
        for i, c in enumerate(cfgs):
            recomputed = where == "layer" and _recomputed(c, op)
            terms[i].append(OpTerm(op, where, count, float(f[i]), float(b[i]), rows[i],
                                   recomputed))
    if m.attention == "unfused" and m.attention_dropout > 0:
        # a catalog op like the others: measured where the data has it, else the standard
        # roofline fallback (memory-bound), said on stderr and refused under ops.strict
        frame, rows = _shapes(cfgs, {"p": m.attention_dropout}, False)
        f, b = fn(DROPOUT, frame, "fwd"), fn(DROPOUT, frame, "bwd")
        after = 1 + [t.op for t in terms[0]].index("ScaledUpperTriangMaskedSoftmax")
        for i, c in enumerate(cfgs):  # between the softmax and the bmm, as the layer runs it
            terms[i].insert(after, OpTerm(DROPOUT, "layer", 1, float(f[i]), float(b[i]),
                                          rows[i], _recomputed(c, DROPOUT)))
    return terms


def estimate_many(cfgs: list[TrainConfig]) -> list[Estimate]:
    """Estimates for configs that share the model, cluster, op source and dtype."""
    base = cfgs[0]
    dtype = base.training.dtype
    device, fn = op_times(base.cluster.device, dtype, base.ops)  # data mode: any device name
    comm = _comm_model(base)
    terms = _op_terms(fn, cfgs)
    held = [_params_per_device(c) for c in cfgs]
    devs = [_busiest(h) for h in held]
    opt = _optimizer_times(fn, cfgs, devs)
    accum = _accumulation_times(fn, cfgs, [h[0] for h in held])
    notes = fn.fallback_notes()  # warns on stderr, or raises under ops.strict
    if base.model.attention == "flash" and base.model.attention_dropout > 0:
        notes = [*notes, _untimed_flash_dropout(base)]
    limit = _memory_limit_gib(base, device)
    if not math.isfinite(limit):
        notes = [*notes, _unchecked_memory(base, device.name)]
    ests = [_assemble(c, devs[i], device, comm, terms[i], opt[i], accum[i], notes, limit)
            for i, c in enumerate(cfgs)]
    for e in ests:
        if (split := _uneven_split(e.config, e.stages)) is not None:
            if len(cfgs) == 1:  # a search's candidates carry it in their notes only
                _said(split)
            e.notes.append(split)
    roofline_ops = fn.roofline_ops()
    comm_note = take_fallback_note(comm)
    if comm_note is not None:
        _said_or_refused(base, comm_note)
    for e in ests:
        e.roofline_ops, e.alpha_beta_collectives = roofline_ops, comm_note is not None
        if comm_note is not None:
            e.notes = [*e.notes, comm_note]
    return ests


def _said_or_refused(c: TrainConfig, msg: str) -> None:
    """A fallback: a warning on stderr, or an error under ``ops.strict``."""
    import warnings

    from opatlas.errors import OpatlasError

    if c.ops.strict:
        raise OpatlasError(f"{msg} (ops.strict: refused)")
    warnings.warn(msg, UserWarning, stacklevel=3)


def _said(msg: str) -> None:
    """A note on stderr that no option refuses: a fact of the layout, not a fallback."""
    import warnings

    warnings.warn(msg, UserWarning, stacklevel=3)


def _uneven_split(c: TrainConfig, per_device: list[int]) -> str | None:
    """The note for layers that do not split evenly over the pipeline stages, or None. Each
    micro-batch waits for the stage with the most layers, so the others idle for the
    difference. Not an error: the engine models the split (``--megatron-args`` refuses one,
    as Megatron-LM does without its uneven-stage flags)."""
    if len(set(per_device)) <= 1:
        return None
    return (f"model.layers {c.model.layers} do not split evenly over parallel.pp "
            f"{c.parallel.pp} pipeline stages: layers per stage {per_device}; the slowest "
            f"stage ({max(per_device)} layers) sets the pace, the others wait for it")


def _memory_limit_gib(c: TrainConfig, device: Any) -> float:
    """What a GPU can hold for the step: ``cluster.memory_gib`` if given, else the catalog's
    memory (infinite for a device known only from its data), less what CUDA reserves."""
    total = c.cluster.memory_gib * GiB if c.cluster.memory_gib else device.memory_bytes
    return (total - RESERVED_BYTES) / GiB


def _untimed_flash_dropout(c: TrainConfig) -> str:
    """Dropout inside the flash kernel (Megatron-LM passes --attention-dropout to it) has no
    time of its own: the flash op (samples or roofline) is the kernel without dropout."""
    msg = (f"model.attention_dropout {c.model.attention_dropout:g} inside flash attention is "
           f"not timed: the flash kernel's time has no dropout in it; set "
           f"model.attention_dropout=0 if the run has none")
    _said_or_refused(c, msg)
    return msg


def _unchecked_memory(c: TrainConfig, name: str) -> str:
    """A device without a memory size: said on stderr, an error under ``ops.strict``."""
    msg = (f"the memory of {name} is unknown (not in the device catalog): nothing is checked "
           f"against it; set cluster.memory_gib (e.g. --set cluster.memory_gib=80)")
    _said_or_refused(c, msg)
    return msg


def estimate_step(cfg: TrainConfig) -> Estimate:
    return estimate_many([cfg])[0]


def _comm_model(cfg: TrainConfig) -> AlphaBeta:
    if cfg.cluster.nccl_data:
        return _measured(cfg.cluster.model_dump_json())
    return AlphaBeta(cfg.cluster)


@functools.lru_cache(maxsize=16)
def _measured(cluster_json: str) -> Measured:
    """Measured collective curves, read once per cluster description."""
    from pathlib import Path

    from opatlas.estimate.config import ClusterConfig
    from opatlas.samples import bundled_dataset

    cluster = ClusterConfig.model_validate_json(cluster_json)
    folder = bundled_dataset() / "nccl" if cluster.nccl_data == "bundled" else \
        Path(str(cluster.nccl_data))
    if not folder.is_dir():
        from opatlas.errors import SpecError

        raise SpecError("no such folder of NCCL samples", key="cluster.nccl_data",
                        value=cluster.nccl_data)
    return _measured_for(cluster, folder)


def _measured_for(cluster: Any, folder: Any) -> Measured:
    """The measured model of ``folder`` for the cluster's device. A folder without samples of
    that device is not said here (``filed_device_name`` warns of it) but recorded on the
    model, for :func:`take_fallback_note` to say once with the collectives it then times by
    the alpha-beta model (or ``ops.strict`` to refuse): one message, not a general warning
    followed by a list of shapes that reads as if the others were measured."""
    import warnings

    from opatlas.samples import filed_device_name, parse_sample_name

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gpu = filed_device_name(folder, cluster.device)
    measured = Measured(cluster, folder, gpu)
    if any("no measured collectives" in str(w.message) for w in caught):
        measured.device = cluster.device
        measured.other_devices = sorted({m["gpu"] for f in folder.glob("*.csv")
                                         if (m := parse_sample_name(f))})
    return measured


def group_stride(p: ParallelConfig, category: str, name: str) -> int:
    """How many ranks apart the members of one group of a collective row sit (ranks are
    numbered tp fastest, then dp, then pp): neighbouring pipeline stages' p2p tp·dp, the
    expert-parallel all-to-all tp, a tensor-parallel group (and its pipeline scatter/gather)
    1. Data-parallel groups carry their own (:func:`dp_groups`)."""
    if name == "p2p":
        return p.tp * p.dp
    return p.tp if category == "ep_comm" else 1


def collective_time(comm: AlphaBeta, op: str, nbytes: float, ranks: int, stride: int,
                    gpn: int) -> float:
    """One collective over ``ranks`` ranks spaced ``stride`` apart (ranks: tp fastest, then dp,
    then pp), with the topology-specific measured model where there is one."""
    if ranks <= 1:
        return 0.0
    within = ranks * stride <= gpn
    per_node = max(1, min(ranks, gpn // stride))
    if isinstance(comm, Measured):
        nodes = max(1, ranks // per_node)  # a reduce-scatter without samples: comm.py's rule
        return float(comm.time_topology(op, np.array([nbytes]), nodes, per_node, within)[0])
    return float(comm.time(op, np.array([nbytes]), ranks, within, per_node)[0])


def _optimizer_times(fn: Any, cfgs: list[TrainConfig], devs: list[tuple[float, list[int], float]]
                     ) -> list[tuple[float, float, float]]:
    """(seconds, parameters updated, the mixed-precision passes' bytes per such parameter) of
    the busiest device's optimizer step: ZeRO ≥ 1 shards the dense parameters' states over dp
    ranks and the experts' over the dp/ep ranks that hold the same experts; only ZeRO-1 keeps
    (and zeroes) the whole gradient buffer."""
    def shard(c: TrainConfig, ranks: int) -> int:
        return ranks if c.parallel.zero >= 1 else 1

    params = np.array([(dev[0] - dev[2]) / shard(c, c.parallel.dp)
                       + dev[2] / shard(c, c.parallel.dp // c.parallel.ep)
                       for c, dev in zip(cfgs, devs, strict=True)])
    m = cfgs[0].model  # ffn and vocab: what data of per-stage steps files (timing only)
    shapes = as_columns({"n_params": np.maximum(params, 1).astype(np.int64), "mp": 1, "dim": 0,
                         "encoders": 0, "ffn": m.ffn_width, "vocab": m.vocab})
    adam = fn("middleStage_optimizer", shapes, "step")  # data, or the roofline said on stderr
    buffers = [dev[0] / n if c.parallel.zero == 1 else 1.0
               for c, dev, n in zip(cfgs, devs, shapes["n_params"], strict=True)]
    return [(float(s) * step_over_adam(c.training, r), float(n), passes_bytes(c.training, r))
            for c, s, n, r in zip(cfgs, adam, shapes["n_params"], buffers, strict=True)]


def _layer_params_on_device(c: TrainConfig) -> tuple[float, float]:
    """(all, experts') parameters of one layer on a device: one TP shard of the weights (the
    norms replicated), 1/ep of the experts."""
    m, p = c.model, c.parallel
    norms, experts = pm.layer_norm_params(m), pm.expert_params(m)
    dense = (pm.layer_params(m) - norms - experts) / p.tp + norms
    expert = experts / (p.tp * p.ep)
    return dense + expert, expert


def _params_per_device(c: TrainConfig) -> tuple[list[float], list[int], float]:
    """Parameters on each pipeline device (one TP shard; 1/ep of the experts), layers per
    device, and one layer's expert parameters on a device."""
    m, p = c.model, c.parallel
    chunks = partition_layers(m.layers, p.pp * p.virtual_stages)
    per_device = [sum(chunks[d::p.pp]) for d in range(p.pp)]
    layer, expert = _layer_params_on_device(c)
    dev = [n * layer for n in per_device]
    dev[0] += pm.embedding_params(m) / p.tp
    dev[-1] += pm.head_params(m) / p.tp
    return dev, per_device, expert


def _busiest(held: tuple[list[float], list[int], float]) -> tuple[float, list[int], float]:
    """Of ``_params_per_device``: the parameters on the busiest pipeline device, layers per
    device, and how many of that device's parameters are experts'."""
    dev, per_device, expert = held
    busiest = int(np.argmax(dev))
    return dev[busiest], per_device, per_device[busiest] * expert


def _accumulation_times(fn: Any, cfgs: list[TrainConfig],
                        params: list[list[float]]) -> list[list[tuple[float, dict]]]:
    """Per config, per pipeline device: (seconds, shape) of adding one micro-batch's weight
    gradients into the gradient buffer, where the weight-gradient GEMMs do not accumulate
    themselves (``training.grad_accumulation_fusion`` false: Megatron-LM's ``main_grad`` hook
    before 2022); ZeRO-2/3 add only their shard. Nothing where the accumulation is fused."""
    out: list[list[tuple[float, dict]]] = [[(0.0, {})] * c.parallel.pp for c in cfgs]
    rows, where = [], []
    for i, c in enumerate(cfgs):
        if c.training.grad_accumulation_fusion:
            continue
        shard = c.parallel.dp if c.parallel.zero >= 2 else 1
        for d, n in enumerate(params[i]):
            rows.append({"n_params": max(1, round(n / shard)),
                         "buffer_bytes": c.training.grad_bytes})
            where.append((i, d))
    if rows:
        times = fn("grad_accumulate", as_columns(rows), "step")  # the roofline, said, if no data
        for (i, d), t, row in zip(where, times, rows, strict=True):
            out[i][d] = (float(t), row)
    return out


def _dp_comm(comm: AlphaBeta, c: TrainConfig, params: float, ranks: int, stride: int,
             nmb: int) -> tuple[float, float, int]:
    """(gradient reduction, parameter gathering, buckets) of ``params`` parameters over a
    data-parallel group of ``ranks`` spaced ``stride`` apart, per ZeRO stage. Gradients travel
    at their own width (fp32 where they are accumulated so), parameters at the weights' (16
    bits, 32 in fp32 training). ZeRO-1 (Megatron-LM's distributed optimizer) reduce-scatters
    the accumulated gradients once a step and all-gathers the updated parameters: an
    all-reduce's bytes split in its two halves
    (Rajbhandari et al. 2020, section 7: stages 1 and 2 move 2Ψ, as plain data parallelism).
    ZeRO-2 and 3 keep only their shard of the gradients, so each micro-batch's are
    reduce-scattered as its backward makes them; ZeRO-3 also gathers the weights for every
    forward and backward."""
    p, gpn = c.parallel, c.cluster.gpus_per_node
    grads, weights = c.training.grad_bytes * params, c.training.weight_bytes * params
    buckets = max(1, math.ceil(grads / (p.bucket_mb * 2**20)))

    def coll(op: str, nbytes: float) -> float:
        return buckets * collective_time(comm, op, nbytes / buckets, ranks, stride, gpn)

    if p.zero == 0:
        return coll("all_reduce", grads), 0.0, buckets
    if p.zero <= 2:
        reductions = nmb if p.zero == 2 else 1
        return reductions * coll("reduce_scatter", grads), coll("all_gather", weights), buckets
    return (nmb * coll("reduce_scatter", grads), 2 * nmb * coll("all_gather", weights),
            buckets)


def _ep_comm(comm: AlphaBeta, c: TrainConfig) -> tuple[float, float]:
    """(bytes, seconds) of one expert-parallel all-to-all: the dispatch or the combine of each
    token's top-k copies, at the activations' width, over the ep ranks (spaced tp apart). A
    MoE layer runs two forward, two backward, and two more for the recomputed forward under
    full recomputation."""
    m, p = c.model, c.parallel  # ep = 1: collective_time is 0 for a group of one rank
    tokens = c.training.micro_batch * m.seq_len / (p.tp if p.sequence_parallel else 1)
    nbytes = c.training.weight_bytes * tokens * m.top_k * m.hidden
    return nbytes, collective_time(comm, "all_to_all", nbytes, p.ep,
                                   group_stride(p, "ep_comm", "all_to_all"),
                                   c.cluster.gpus_per_node)


def _assemble(c: TrainConfig, dev: tuple[float, list[int], float], device: Any, comm: AlphaBeta,
              terms: list[OpTerm], opt: tuple[float, float, float], accum: list[tuple[float, dict]],
              notes: list[str], limit: float) -> Estimate:
    m, p, gpn = c.model, c.parallel, c.cluster.gpus_per_node
    nmb = c.micro_batches
    # one layer's activations, at the training dtype's width (16 bits, 32 in fp32 training)
    act = float(c.training.weight_bytes * c.training.micro_batch * m.seq_len * m.hidden)
    per_layer_comm = 4 + (2 if p.recompute == "full" else 0)  # fwd 2, bwd 2, recomputed fwd 2
    ar = collective_time(comm, "all_reduce", act, p.tp, group_stride(p, "tp_comm", "all_reduce"),
                         gpn)
    # Megatron-LM's scatter/gather (Narayanan et al. 2021, section 4.1): each of the tp ranks
    # sends its 1/tp of the activation over its own link; without sequence parallelism (where
    # the activation is already split) the receiving ranks all-gather the pieces in the node
    p2p_bytes = act / p.tp
    p2p = collective_time(comm, "p2p", p2p_bytes, 2, group_stride(p, "p2p", "p2p"), gpn) \
        if p.pp > 1 else 0.0
    ag = collective_time(comm, "all_gather", act, p.tp, group_stride(p, "tp_comm", "all_gather"),
                         gpn)
    gather = ag if p.pp > 1 and not p.sequence_parallel else 0.0
    chunks = p.virtual_stages if p.schedule == "interleaved" else 1
    a2a_bytes, a2a = _ep_comm(comm, c)
    params_dev, per_device, experts_dev = dev

    def per_call(where: str, attr: str, recomputed_only: bool = False) -> float:
        return sum(t.count * getattr(t, attr) for t in terms
                   if t.where == where and (t.recomputed or not recomputed_only))

    lf, lb, rf = per_call("layer", "fwd_s"), per_call("layer", "bwd_s"), \
        per_call("layer", "fwd_s", True)
    first = per_call("embedding", "fwd_s") + per_call("embedding", "bwd_s")
    last = per_call("head", "fwd_s") + per_call("head", "bwd_s")

    def tp_calls(d: int) -> int:
        """The layers' all-reduces, the embedding's output one on the first device (its
        vocab-parallel lookup) and the head's input-gradient one on the last (its
        column-parallel projection's backward)."""
        return per_device[d] * per_layer_comm + (d == 0) + (d == p.pp - 1)

    def regathers(d: int) -> int:
        """Sequence parallelism keeps only its shard of a column-parallel projection's input,
        so the backward all-gathers it again for the weight gradient (Megatron-LM's
        ``LinearWithGradAccumulationAndAsyncCommunication``): the layers' QKV and FC1, and
        the head on the last device. Exposed, like the other tensor-parallel collectives."""
        if not p.sequence_parallel:
            return 0
        return per_device[d] * 2 + (d == p.pp - 1)

    def tp_time(d: int) -> float:
        return ar * tp_calls(d) + ag * regathers(d)

    def sends(d: int) -> int:
        """Per micro-batch, the chunk boundaries this device receives and sends across: one
        neighbour exchange each (an activation one way, its gradient the other, over
        full-duplex links), v per side under the interleaved schedule."""
        return 0 if p.pp == 1 else chunks - (d == 0) + chunks - (d == p.pp - 1)

    stage_times = [layers * (lf + lb + rf) + (first if d == 0 else 0.0)
                   + (last if d == p.pp - 1 else 0.0) + tp_time(d)
                   + a2a * layers * per_layer_comm + (p2p + gather) * sends(d) + accum[d][0]
                   for d, layers in enumerate(per_device)]
    slow = int(np.argmax(stage_times))
    t, layers = stage_times[slow], per_device[slow]
    items = op_items(terms, layers, nmb, slow == 0, slow == p.pp - 1)
    if accum[slow][0] > 0:
        items.append(StepItem("grad_accumulate", "step", "compute", float(nmb),
                              nmb * accum[slow][0], accum[slow][1]))
    items += comm_item("all_reduce", "tp_comm", nmb * tp_calls(slow), ar,
                       {"bytes": act, "ranks": p.tp})
    items += comm_item("all_gather", "tp_comm", nmb * regathers(slow), ag,
                       {"bytes": act, "ranks": p.tp, "role": "sequence-parallel re-gather"})
    items += comm_item("all_to_all", "ep_comm", nmb * layers * per_layer_comm, a2a,
                       {"bytes": a2a_bytes, "ranks": p.ep})
    items += comm_item("p2p", "p2p", nmb * sends(slow), p2p, {"bytes": p2p_bytes, "ranks": 2})
    items += comm_item("all_gather", "p2p", nmb * sends(slow), gather,
                       {"bytes": act, "ranks": p.tp, "role": "pipeline scatter/gather"})
    sched = Schedule(p.schedule, p.pp, nmb, p.virtual_stages if p.schedule == "interleaved" else 1)
    bubble = nmb * t * sched.bubble_fraction()
    if bubble > 0:
        items.append(StepItem("pipeline bubble", "bubble", "pp_bubble", 1.0, bubble,
                              {"schedule": p.schedule, "stages": p.pp, "micro_batches": nmb,
                               "virtual_stages": sched.v}))
    items += _dp_items(comm, c, params_dev, experts_dev, nmb, per_device[-1] * (lb + rf),
                       nmb * (t - tp_time(slow)))
    opt_s, opt_params, passes = opt
    items.append(StepItem("optimizer", "step", "optimizer", 1.0, opt_s,
                          {"n_params": opt_params, "passes_bytes_per_param": passes}))
    breakdown = breakdown_of(items)
    step = sum(breakdown.values())
    tokens = c.training.global_batch * m.seq_len
    mfu = pm.model_flops_per_token(m) * tokens / (step * c.gpus * device.peak(c.training.dtype))
    mem, mem_stage = _memory(c, sched)
    return Estimate(c, step, breakdown, tokens / step, mfu, mem, limit, per_device, list(notes),
                    items, memory_stage=mem_stage)


def dp_groups(p: ParallelConfig, params_dev: float, experts_dev: float) -> dict[tuple[int, int], float]:
    """The parameters each data-parallel group (ranks, stride) reduces: the dense ones over
    all dp ranks, the experts' over the dp/ep ranks holding the same experts (one group when
    ep = 1)."""
    groups = {(p.dp, p.tp): params_dev - experts_dev}
    key = (p.dp // p.ep, p.tp * p.ep)
    groups[key] = groups.get(key, 0.0) + experts_dev
    return groups


def _dp_items(comm: AlphaBeta, c: TrainConfig, params_dev: float, experts_dev: float, nmb: int,
              backward_window: float, compute_window: float) -> list[StepItem]:
    """The data-parallel traffic: gradients and parameters per data-parallel group (ranks,
    stride), the dense ones over all dp ranks, the experts' over the dp/ep ranks holding them
    (the same group when ep = 1). With overlap, a gradient reduction hides behind the backward
    that makes it (``backward_window``: one micro-batch's; ZeRO-2/3 reduce after every
    micro-batch) but for its last bucket, and ZeRO-3's parameter gathers behind the step's
    compute (``compute_window``) but for the first bucket of each forward and backward of a
    micro-batch, which the layers wait for before any compute can start. Each row's time is
    what stays exposed; ``overlapped_s`` in its shape is what the overlap hid, so hidden
    traffic is still listed. A group of one rank (the experts' when ep = dp) moves nothing:
    it adds no calls and no buckets (the last bucket exposed is one that moves)."""
    p = c.parallel
    groups = dp_groups(p, params_dev, experts_dev)
    parts = [_dp_comm(comm, c, n, ranks, stride, nmb) for (ranks, stride), n in groups.items()
             if ranks > 1]
    grad_comm, param_comm, buckets = (sum(x) for x in zip(*parts, strict=True)) if parts \
        else (0.0, 0.0, 0)
    reductions = nmb if p.zero >= 2 else 1
    grad_shown, param_shown = grad_comm, param_comm
    if p.dp_overlap and buckets:
        grad_shown = max(grad_comm - reductions * backward_window,
                         grad_comm / buckets)  # the last bucket of each reduction
        if p.zero == 3:  # param_comm: 2·nmb passes of ``buckets`` gathers each
            param_shown = max(param_comm - compute_window, param_comm / buckets)
        # both share the data-parallel links: what they carry beyond the step's compute time
        # cannot hide, however well each overlaps on its own
        beyond = grad_comm + param_comm - compute_window - grad_shown - param_shown
        if beyond > 0:
            if p.zero == 3:
                param_shown += beyond
            else:
                grad_shown += beyond
    params = sum(groups.values())
    gathers = buckets * (2 * nmb if p.zero == 3 else 1)
    # the shapes' bytes are one whole pass over the gradients (parameters) of every group,
    # as analyze's bound shares them out (analyze/sources/config.py, ``_dp_groups``)
    return (_dp_item("all_reduce" if p.zero == 0 else "reduce_scatter", buckets * reductions,
                     grad_comm, grad_shown, {"bytes": c.training.grad_bytes * params,
                                             "ranks": p.dp, "role": "gradients",
                                             "buckets": buckets})
            + _dp_item("all_gather", gathers, param_comm, param_shown,
                       {"bytes": c.training.weight_bytes * params, "ranks": p.dp,
                        "role": "parameters", "buckets": buckets}))


def _dp_item(name: str, calls: float, total_s: float, exposed_s: float,
             shape: dict[str, Any]) -> list[StepItem]:
    """A data-parallel row: nothing for a group of one rank (no traffic at all)."""
    if calls <= 0 or total_s <= 0:
        return []
    return [StepItem(name, "comm", "dp_comm", calls, exposed_s,
                     {**shape, "overlapped_s": total_s - exposed_s})]


def _memory(c: TrainConfig, sched: Schedule) -> tuple[Memory, int]:
    """(memory, stage) of the fullest pipeline stage. Each stage holds its own layers' model
    states (the embedding's on the first, the head's on the last), its layers' activations
    times the micro-batches it has in flight (the first stage the most under 1F1B, but an
    uneven split gives the middle stages more layers) and, on the last, the logits buffer
    (``other``): fp32, as many micro-batches' as wait for their loss's backward there: one,
    whose backward follows its forward, but every micro-batch's under GPipe (all forwards
    first)."""
    m, p = c.model, c.parallel
    dev, per_device, expert = _params_per_device(c)
    per_layer = activation_bytes_per_layer(m, c.training.micro_batch, p.tp, p.sequence_parallel,
                                           p.recompute, flash=m.attention == "flash",
                                           element_bytes=c.training.weight_bytes)
    logits = 4.0 * c.training.micro_batch * m.seq_len * m.vocab / p.tp
    logits *= sched.m if sched.name == "gpipe" else 1
    stages = [_stage_memory(c, dev[d], layers * expert, layers,
                            layers * per_layer * sched.in_flight(d),
                            logits if d == p.pp - 1 else 0.0)
              for d, layers in enumerate(per_device)]
    fullest = max(range(p.pp), key=lambda d: stages[d].total)
    return stages[fullest], fullest


def _stage_memory(c: TrainConfig, params: float, experts: float, layers: int, acts: float,
                  other: float) -> Memory:
    """One pipeline stage's memory: its ``params`` parameters' states (its ``experts``
    sharded over the dp/ep ranks holding the same experts), ZeRO-3's gathered layers, and the
    activations and other buffers given."""
    p, g, w = c.parallel, c.training.grad_bytes, c.training.weight_bytes
    dense = model_state_bytes(params - experts, p.dp, p.zero, weight_bytes=w, grad_bytes=g)
    expert = model_state_bytes(experts, p.dp // p.ep, p.zero, weight_bytes=w, grad_bytes=g)
    states = {k: dense[k] + expert[k] for k in dense}
    weights = states["weights"] + _gathered_weights(c, layers)
    # the reserve (RESERVED_BYTES) is not here: the limit the total is checked against is
    # already the device's memory less it (_memory_limit_gib)
    return Memory(weights, states["gradients"], states["optimizer"], acts, other)


def _gathered_weights(c: TrainConfig, layers: int) -> float:
    """The whole (not dp-sharded) weights ZeRO-3 holds beside its shard on a stage of
    ``layers`` layers: those of the layer computing and of the next one, prefetched (at the
    training dtype's width)."""
    if c.parallel.zero < 3:
        return 0.0
    return c.training.weight_bytes * min(2, layers) * _layer_params_on_device(c)[0]
