"""Compose op and collective times into the time of one optimizer step.

Per micro-batch, the slowest pipeline device runs its layers forward and backward (backward
includes the recomputed forward under full recomputation), the tensor-parallel collectives of
each layer, the embedding (first device) or head and loss (last device), and the point-to-point
sends to its neighbours. The schedule adds the bubble: m·t·(1 + (p−1)/(v·m)). Data-parallel
gradient reduction (per ZeRO stage, in buckets, optionally overlapped with the last backward)
and the optimizer step follow. Op times for all configs are predicted in one batch per op.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from opatlas.devices import get_device
from opatlas.estimate import model as pm
from opatlas.estimate.comm import AlphaBeta, Measured
from opatlas.estimate.config import TrainConfig
from opatlas.estimate.memory import Memory, activation_bytes_per_layer, model_state_bytes
from opatlas.estimate.optimes import DataTimes, RooflineTimes
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
                "parallel": {"dp": p.dp, "tp": p.tp, "pp": p.pp, "virtual_stages": p.virtual_stages,
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
    device = get_device(base.cluster.device)
    dtype = base.training.dtype
    if base.ops.mode == "data":
        fn: Any = DataTimes(device, base.cluster.device.replace(" ", ""), dtype, base.ops.data,
                            base.ops.compute_efficiency, base.ops.memory_efficiency)
    else:
        fn = RooflineTimes(device, dtype, base.ops.compute_efficiency, base.ops.memory_efficiency)
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
    notes = [f"op {x} has no measured data; roofline used" for x in
             sorted(getattr(fn, "fallbacks", set()))]
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
    from opatlas.store.ett import bundled_dataset

    cluster = ClusterConfig.model_validate_json(cluster_json)
    folder = bundled_dataset() / "nccl" if cluster.nccl_data == "bundled" else \
        Path(str(cluster.nccl_data))
    return Measured(cluster, folder, cluster.device.replace(" ", ""))


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
                     devs: list[tuple[float, list[int]]]) -> np.ndarray:
    params = np.array([dev[0] / (c.parallel.dp if c.parallel.zero >= 1 else 1)
                       for c, dev in zip(cfgs, devs, strict=True)])
    shapes = pd.DataFrame({"n_params": np.maximum(params, 1).astype(np.int64), "mp": 1, "dim": 0,
                           "encoders": 0})
    try:
        return fn("middleStage_optimizer", shapes, "step")
    except Exception:
        return RooflineTimes.__call__(fn, "adam_step", shapes, "step")


def _device_params(c: TrainConfig) -> tuple[float, list[int]]:
    """Parameters on the busiest pipeline device (one TP shard), and layers per device."""
    m, p = c.model, c.parallel
    chunks = partition_layers(m.layers, p.pp * p.virtual_stages)
    per_device = [sum(chunks[d::p.pp]) for d in range(p.pp)]
    layer = (pm.layer_params(m) - 2 * pm.norm_params(m)) / p.tp + 2 * pm.norm_params(m)
    dev = [n * layer for n in per_device]
    dev[0] += pm.embedding_params(m) / p.tp
    dev[-1] += pm.head_params(m) / p.tp
    return max(dev), per_device


def _assemble(c: TrainConfig, dev: tuple[float, list[int]], device: Any, comm: AlphaBeta,
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
    params_dev, per_device = dev
    stage_times = []
    for d, layers in enumerate(per_device):
        comp = layers * (lf + lb + recompute_f) + (ef + eb if d == 0 else 0.0) + \
            (hf + hb if d == p.pp - 1 else 0.0)
        tpc = layers * (tp_f + tp_b) + (ar if d == 0 else 0.0)
        sends = p2p * ((d < p.pp - 1) + (d > 0))
        stage_times.append((comp + tpc + sends, comp, tpc, sends))
    t, comp, tpc, sends = max(stage_times)
    sched = Schedule(p.schedule, p.pp, nmb, p.virtual_stages if p.schedule == "interleaved" else 1)
    bubble = nmb * t * sched.bubble_fraction()
    grads = 2.0 * params_dev
    buckets = max(1, math.ceil(grads / (p.bucket_mb * 2**20)))
    dp = lambda op, nbytes: buckets * _coll(comm, op, nbytes / buckets, p.dp, p.tp, gpn)  # noqa: E731
    if p.zero == 0:
        grad_comm, param_comm = dp("all_reduce", grads), 0.0
    elif p.zero == 1:
        grad_comm, param_comm = dp("all_reduce", grads), dp("all_gather", grads)
    elif p.zero == 2:
        grad_comm, param_comm = dp("reduce_scatter", grads), dp("all_gather", grads)
    else:
        grad_comm, param_comm = dp("reduce_scatter", grads), 2 * nmb * dp("all_gather", grads)
    if p.dp_overlap and p.dp > 1:
        window = per_device[-1] * (lb + recompute_f)  # the last micro-batch's backward
        grad_comm = max(grad_comm - window, grad_comm / buckets)
        if p.zero == 3:
            param_comm = max(0.0, param_comm - nmb * (t - tpc))
    dp_comm = grad_comm + param_comm
    breakdown = {"compute": float(nmb * comp), "tp_comm": float(nmb * tpc),
                 "pp_bubble": float(bubble),
                 "p2p": float(nmb * sends), "dp_comm": float(dp_comm), "optimizer": opt}
    step = sum(breakdown.values())
    tokens = c.training.global_batch * m.seq_len
    mfu = pm.model_flops_per_token(m) * tokens / (step * c.gpus * device.peak(c.training.dtype))
    mem = _memory(c, params_dev, per_device, sched)
    limit = (device.memory_bytes - RESERVED_BYTES) / GiB
    return Estimate(c, step, breakdown, tokens / step, mfu, mem, limit, per_device, list(notes))


def _memory(c: TrainConfig, params_dev: float, per_device: list[int], sched: Schedule) -> Memory:
    m, p = c.model, c.parallel
    states = model_state_bytes(params_dev, p.dp, p.zero)
    per_layer = activation_bytes_per_layer(m, c.training.micro_batch, p.tp, p.sequence_parallel,
                                           p.recompute)
    acts = per_device[0] * per_layer * sched.in_flight()
    logits = 4.0 * c.training.micro_batch * m.seq_len * m.vocab / p.tp if p.pp == 1 else 0.0
    return Memory(states["weights"], states["gradients"], states["optimizer"], acts,
                  logits + RESERVED_BYTES)
