"""Compose op and collective times into the time of one optimizer step.

Per micro-batch, the slowest pipeline device runs its layers forward and backward (backward
includes the recomputed forward under full recomputation), the tensor-parallel collectives of
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
import pandas as pd

from opatlas.estimate import model as pm
from opatlas.estimate.comm import AlphaBeta, Measured
from opatlas.estimate.config import TrainConfig
from opatlas.estimate.memory import Memory, activation_bytes_per_layer, model_state_bytes
from opatlas.estimate.optimes import RooflineTimes, op_times
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

    @property
    def memory_gib(self) -> float:
        return self.memory.total / GiB

    @property
    def fits(self) -> bool:
        return self.memory_gib <= self.memory_limit_gib

    def as_json(self) -> dict[str, Any]:
        p = self.config.parallel
        return {"model": self.config.model.name, "gpus": self.config.gpus,
                "parallel": {"dp": p.dp, "tp": p.tp, "pp": p.pp, "ep": p.ep,
                             "virtual_stages": p.virtual_stages,
                             "schedule": p.schedule, "micro_batch": self.config.training.micro_batch,
                             "micro_batches": self.config.micro_batches, "zero": p.zero,
                             "recompute": p.recompute, "sequence_parallel": p.sequence_parallel},
                "step_time_s": self.step_time_s, "breakdown": self.breakdown,
                "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "memory_gib": self.memory_gib, "memory_limit_gib": self.memory_limit_gib,
                "memory_breakdown_gib": {k: v / GiB for k, v in vars(self.memory).items()},
                "fits": self.fits, "layers_per_stage": self.stages, "notes": self.notes}


def _layer_ops(cfg: TrainConfig) -> list[tuple[str, dict[str, Any], int]]:
    """(op, extra shape parameters, count) of one transformer layer."""
    m = cfg.model
    norm = "RMSlayernorm" if m.norm == "rmsnorm" else "layernorm"
    ops: list[tuple[str, dict[str, Any], int]] = [
        (norm, {}, 2), ("linear1", {"kv_heads": m.kv}, 1), ("flash_atten", {"kv_heads": m.kv}, 1),
        ("linear2", {}, 1), ("res_add", {}, 2)]
    if m.rope:
        ops += [("RoPE", {}, 1), ("RoPE", {"h": m.kv, "dim": m.kv * (m.hidden // m.heads)}, 1)]
    f = m.ffn_width
    if m.experts:
        ops.append(("moe", {"experts": m.experts, "top_k": m.top_k, "ffn": f,
                            "gated": int(m.ffn_kind == "swiglu")}, 1))
    elif m.ffn_kind == "swiglu":
        ops += [("linear3", {"ffn": 2 * f}, 1), ("swiglu", {"ffn": f}, 1), ("linear4", {"ffn": f}, 1)]
    else:
        ops += [("linear3", {"ffn": f}, 1), ("gelu", {"ffn": f}, 1), ("linear4", {"ffn": f}, 1)]
    return ops


def _shapes(cfgs: list[TrainConfig], extra: dict[str, Any], seq_split: bool) -> pd.DataFrame:
    rows = []
    for c in cfgs:
        m, p = c.model, c.parallel
        seq = m.seq_len // p.tp if (seq_split and p.sequence_parallel) else m.seq_len
        rows.append({"mp": p.tp, "b": c.training.micro_batch, "h": m.heads, "l": seq,
                     "dim": m.hidden, **extra})
    return pd.DataFrame(rows)


def _times(fn: Any, op: str, shapes: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return fn(op, shapes, "fwd"), fn(op, shapes, "bwd")


def estimate_many(cfgs: list[TrainConfig]) -> list[Estimate]:
    """Estimates for configs that share the model, cluster, op source and dtype."""
    base = cfgs[0]
    dtype = base.training.dtype
    device, fn = op_times(base.cluster.device, dtype, base.ops)  # data mode: any device name
    comm = _comm_model(base)
    layer_f, layer_b = np.zeros(len(cfgs)), np.zeros(len(cfgs))
    for op, extra, count in _layer_ops(base):
        seq_split = op in ("RMSlayernorm", "layernorm", "res_add")
        f, b = _times(fn, op, _shapes(cfgs, extra, seq_split))
        layer_f += count * f
        layer_b += count * b
    m = base.model
    emb_f, emb_b = _times(fn, "embedding", _shapes(cfgs, {"vocab": m.vocab}, False))
    head = [_times(fn, "RMSlayernorm" if m.norm == "rmsnorm" else "layernorm",
                   _shapes(cfgs, {}, True)),
            _times(fn, "linear_final", _shapes(cfgs, {"vocab": m.vocab}, False)),
            _times(fn, "parallel_cross_entropy_128", _shapes(cfgs, {"vocab": m.vocab}, False))]
    head_f, head_b = sum(h[0] for h in head), sum(h[1] for h in head)
    devs = [_device_params(c) for c in cfgs]
    opt = _optimizer_times(fn, cfgs, devs)
    notes = fn.fallback_notes()  # warns on stderr, or raises under ops.strict
    return [_assemble(c, devs[i], device, comm, layer_f[i], layer_b[i], emb_f[i], emb_b[i],
                      head_f[i], head_b[i], float(opt[i]), notes)
            for i, c in enumerate(cfgs)]


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
    from opatlas.samples import bundled_dataset, filed_device_name

    cluster = ClusterConfig.model_validate_json(cluster_json)
    folder = bundled_dataset() / "nccl" if cluster.nccl_data == "bundled" else \
        Path(str(cluster.nccl_data))
    return Measured(cluster, folder, filed_device_name(folder, cluster.device))


def _coll(comm: AlphaBeta, op: str, nbytes: float, ranks: int, stride: int, gpn: int) -> float:
    """One collective over ``ranks`` ranks spaced ``stride`` apart (ranks: tp fastest, then dp,
    then pp), with the topology-specific measured model where there is one."""
    if ranks <= 1:
        return 0.0
    within = ranks * stride <= gpn
    if isinstance(comm, Measured):
        per_node = max(1, min(ranks, gpn // stride))
        nodes = max(1, ranks // per_node)
        return float(comm.time_topology(op, np.array([nbytes]), nodes, per_node, within)[0])
    return float(comm.time(op, np.array([nbytes]), ranks, within)[0])


def _optimizer_times(fn: Any, cfgs: list[TrainConfig],
                     devs: list[tuple[float, list[int], float]]) -> np.ndarray:
    """The optimizer step of the busiest device: ZeRO ≥ 1 shards the dense parameters' states
    over dp ranks and the experts' over the dp/ep ranks that hold the same experts."""
    def shard(c: TrainConfig, ranks: int) -> int:
        return ranks if c.parallel.zero >= 1 else 1

    params = np.array([(dev[0] - dev[2]) / shard(c, c.parallel.dp)
                       + dev[2] / shard(c, c.parallel.dp // c.parallel.ep)
                       for c, dev in zip(cfgs, devs, strict=True)])
    shapes = pd.DataFrame({"n_params": np.maximum(params, 1).astype(np.int64), "mp": 1, "dim": 0,
                           "encoders": 0})
    try:
        return fn("middleStage_optimizer", shapes, "step")
    except Exception:
        return RooflineTimes.__call__(fn, "adam_step", shapes, "step")


def _device_params(c: TrainConfig) -> tuple[float, list[int], float]:
    """Parameters on the busiest pipeline device (one TP shard; 1/ep of the experts), layers
    per device, and how many of that device's parameters are experts'."""
    m, p = c.model, c.parallel
    chunks = partition_layers(m.layers, p.pp * p.virtual_stages)
    per_device = [sum(chunks[d::p.pp]) for d in range(p.pp)]
    norms, experts = 2 * pm.norm_params(m), pm.expert_params(m)
    dense = (pm.layer_params(m) - norms - experts) / p.tp + norms
    expert = experts / (p.tp * p.ep)
    dev = [n * (dense + expert) for n in per_device]
    dev[0] += pm.embedding_params(m) / p.tp
    dev[-1] += pm.head_params(m) / p.tp
    busiest = int(np.argmax(dev))
    return dev[busiest], per_device, per_device[busiest] * expert


def _dp_comm(comm: AlphaBeta, c: TrainConfig, grads: float, ranks: int, stride: int,
             nmb: int) -> tuple[float, float, int]:
    """(gradient reduction, parameter gathering, buckets) of ``grads`` bytes over a
    data-parallel group of ``ranks`` spaced ``stride`` apart, per ZeRO stage."""
    p, gpn = c.parallel, c.cluster.gpus_per_node
    buckets = max(1, math.ceil(grads / (p.bucket_mb * 2**20)))

    def coll(op: str) -> float:
        return buckets * _coll(comm, op, grads / buckets, ranks, stride, gpn)

    if p.zero == 0:
        return coll("all_reduce"), 0.0, buckets
    if p.zero == 1:
        return coll("all_reduce"), coll("all_gather"), buckets
    if p.zero == 2:
        return coll("reduce_scatter"), coll("all_gather"), buckets
    return coll("reduce_scatter"), 2 * nmb * coll("all_gather"), buckets


def _ep_comm(comm: AlphaBeta, c: TrainConfig) -> tuple[float, float]:
    """All-to-all time per MoE layer, forward and backward: dispatch and combine of each
    token's top-k copies over the ep ranks (spaced tp apart), twice more in the backward, and
    again for the recomputed forward under full recomputation."""
    m, p = c.model, c.parallel  # ep = 1: _coll is 0 for a group of one rank
    tokens = c.training.micro_batch * m.seq_len / (p.tp if p.sequence_parallel else 1)
    a2a = _coll(comm, "all_to_all", 2.0 * tokens * m.top_k * m.hidden, p.ep, p.tp,
                c.cluster.gpus_per_node)
    return 2 * a2a, 2 * a2a + (2 * a2a if p.recompute == "full" else 0.0)


def _assemble(c: TrainConfig, dev: tuple[float, list[int], float], device: Any, comm: AlphaBeta,
              lf: float, lb: float, ef: float, eb: float, hf: float, hb: float, opt: float,
              notes: list[str]) -> Estimate:
    m, p, gpn = c.model, c.parallel, c.cluster.gpus_per_node
    mb, nmb = c.training.micro_batch, c.micro_batches
    act = 2.0 * mb * m.seq_len * m.hidden  # one layer's activations, 16-bit
    ar = _coll(comm, "all_reduce", act, p.tp, 1, gpn)
    recompute_f = lf if p.recompute == "full" else 0.0
    tp_f, tp_b = 2 * ar, 2 * ar + (2 * ar if p.recompute == "full" else 0.0)
    p2p = _coll(comm, "p2p", act / (p.tp if p.sequence_parallel else 1), 2, p.tp * p.dp, gpn) \
        if p.pp > 1 else 0.0
    params_dev, per_device, experts_dev = dev
    ep_f, ep_b = _ep_comm(comm, c)
    stage_times = []
    for d, layers in enumerate(per_device):
        comp = layers * (lf + lb + recompute_f) + (ef + eb if d == 0 else 0.0) + \
            (hf + hb if d == p.pp - 1 else 0.0)
        tpc = layers * (tp_f + tp_b) + (ar if d == 0 else 0.0)
        epc = layers * (ep_f + ep_b)
        sends = p2p * ((d < p.pp - 1) + (d > 0))
        stage_times.append((comp + tpc + epc + sends, comp, tpc, epc, sends))
    t, comp, tpc, epc, sends = max(stage_times)
    sched = Schedule(p.schedule, p.pp, nmb, p.virtual_stages if p.schedule == "interleaved" else 1)
    bubble = nmb * t * sched.bubble_fraction()
    # gradient bytes per data-parallel group (ranks, stride): the dense ones over all dp ranks,
    # the experts' over the dp/ep ranks holding them (the same group when ep = 1)
    groups = {(p.dp, p.tp): 2.0 * (params_dev - experts_dev)}
    key = (p.dp // p.ep, p.tp * p.ep)
    groups[key] = groups.get(key, 0.0) + 2.0 * experts_dev
    parts = [_dp_comm(comm, c, g, ranks, stride, nmb) for (ranks, stride), g in groups.items()]
    grad_comm, param_comm, buckets = (sum(x) for x in zip(*parts, strict=True))
    if p.dp_overlap and p.dp > 1:
        window = per_device[-1] * (lb + recompute_f)  # the last micro-batch's backward
        grad_comm = max(grad_comm - window, grad_comm / buckets)
        if p.zero == 3:
            param_comm = max(0.0, param_comm - nmb * (t - tpc))
    dp_comm = grad_comm + param_comm
    breakdown = {"compute": float(nmb * comp), "tp_comm": float(nmb * tpc),
                 "ep_comm": float(nmb * epc), "pp_bubble": float(bubble),
                 "p2p": float(nmb * sends), "dp_comm": float(dp_comm), "optimizer": opt}
    step = sum(breakdown.values())
    tokens = c.training.global_batch * m.seq_len
    mfu = pm.model_flops_per_token(m) * tokens / (step * c.gpus * device.peak(c.training.dtype))
    mem = _memory(c, params_dev, experts_dev, per_device, sched)
    limit = (device.memory_bytes - RESERVED_BYTES) / GiB
    return Estimate(c, step, breakdown, tokens / step, mfu, mem, limit, per_device, list(notes))


def _memory(c: TrainConfig, params_dev: float, experts_dev: float, per_device: list[int],
            sched: Schedule) -> Memory:
    m, p = c.model, c.parallel
    dense = model_state_bytes(params_dev - experts_dev, p.dp, p.zero)
    experts = model_state_bytes(experts_dev, p.dp // p.ep, p.zero)  # ZeRO shards over dp/ep
    states = {k: dense[k] + experts[k] for k in dense}
    per_layer = activation_bytes_per_layer(m, c.training.micro_batch, p.tp, p.sequence_parallel,
                                           p.recompute)
    acts = per_device[0] * per_layer * sched.in_flight()
    logits = 4.0 * c.training.micro_batch * m.seq_len * m.vocab / p.tp if p.pp == 1 else 0.0
    return Memory(states["weights"], states["gradients"], states["optimizer"], acts,
                  logits + RESERVED_BYTES)
