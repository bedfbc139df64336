"""Training configurations: pydantic models, loaded from opatlas YAML or from
estimate-train-time's example YAML unchanged (``training_config: [pp, mp, dp, b, h, l, dim,
steps_per_update, gpus_per_node]``, ``encoders``, ``gpu_name`` ...)."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from opatlas.errors import OpatlasError, SpecError
from opatlas.yaml_io import load_yaml


def at_key(key: str, value: object, message: str) -> ValidationError:
    """A rule across keys broken, reported at the dotted ``key`` of the value at fault (as
    ``--set`` names it), so that the error names that key and value and is blamed on the
    ``--set`` that gave it; pydantic keeps the location of a ValidationError raised in a
    validator (a ValueError's would be the whole model's)."""
    error = PydanticCustomError("value_error", message)  # no context: the text is as given
    return ValidationError.from_exception_data("config", [InitErrorDetails(
        type=error, loc=tuple(key.split(".")), input=value)])


def tp_split_rule(m: ModelConfig, tp: int) -> str | None:
    """Why ``tp`` cannot split ``m``'s attention, or None. Each tensor-parallel rank takes
    whole key/value heads with their query groups: Megatron-Core requires the query groups
    (num_query_groups, the kv heads) to be a multiple of tp, and with them the heads. The kv
    heads are not replicated over ranks (as inference engines do when tp exceeds them)."""
    if m.kv % tp == 0:
        return None
    if m.kv == m.heads:
        return (f"tp {tp} must divide heads {m.heads} (each tensor-parallel rank takes whole "
                f"attention heads)")
    return (f"tp {tp} must divide kv_heads {m.kv}, the query groups (each tensor-parallel rank "
            f"takes whole groups, as Megatron-Core requires; kv heads are not replicated)")


def tokens_rule(micro_batch: int, seq_len: int) -> str | None:
    """Why one micro-batch holds too many tokens, or None."""
    if micro_batch * seq_len > MAX_TOKENS:
        return (f"micro_batch {micro_batch} × seq_len {seq_len} tokens exceeds {MAX_TOKENS:,} "
                f"in one micro-batch")
    return None


def ffn_split_rule(m: ModelConfig, tp: int) -> str | None:
    """Why ``tp`` cannot split the FFN's width (Megatron-LM splits it over the tp ranks)."""
    return f"ffn {m.ffn_width} not divisible by tp {tp}" if m.ffn_width % tp else None


def moe_rule(m: ModelConfig, ep: int) -> str | None:
    """Why expert parallelism ``ep`` needs another model, or None."""
    return f"ep {ep} needs a MoE model (experts > 0)" if ep > 1 and not m.experts else None


def schedule_rule(schedule: str, virtual_stages: int, pp: int) -> str | None:
    """Why the pipeline ``schedule`` cannot run ``virtual_stages`` chunks a device on ``pp``
    stages, or None."""
    if schedule == "interleaved" and virtual_stages < 2:
        return (f"parallel.schedule=interleaved needs parallel.virtual_stages >= 2, not "
                f"{virtual_stages} (the interleaved schedule runs several chunks a device)")
    if schedule != "interleaved" and virtual_stages > 1:
        return (f"virtual_stages {virtual_stages} needs schedule: interleaved ({schedule} runs "
                f"one chunk of layers per device)")
    if schedule == "interleaved" and pp < 2:
        return (f"parallel.schedule=interleaved needs parallel.pp > 1, not {pp} "
                f"(Megatron-LM runs it only over pipeline stages)")
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML's true/false is not a count: pydantic would take it as 1 or 0."""
        kind = cls.model_fields[info.field_name].annotation if info.field_name else None
        numeric = {int, float, int | None, float | None}
        if isinstance(value, bool) and kind in numeric:
            raise ValueError(f"expected a number, not {str(value).lower()}")
        return value


# bounds that keep every op's counts within 64-bit integers (a micro-batch's tokens times
# two widths), far beyond any model trained
MAX_WIDTH, MAX_FFN, MAX_VOCAB = 2**17, 2**19, 2**21
MAX_TOKENS = 2**24  # of one micro-batch: sequence length × micro-batch


class ModelConfig(_Strict):
    name: str = "model"
    layers: int = Field(gt=0, le=2**20)
    hidden: int = Field(gt=0, le=MAX_WIDTH)
    heads: int = Field(gt=0, le=2**12)
    kv_heads: int | None = Field(default=None, gt=0, le=2**12)
    head_dim: int | None = Field(
        default=None, gt=0, le=2**14, description="width of one attention head; hidden / heads unless "
                                        "given (Qwen3, Gemma: heads · head_dim may differ from "
                                        "hidden)")
    ffn: int | None = Field(default=None, gt=0, le=MAX_FFN)
    ffn_kind: Literal["gelu", "swiglu"] = "gelu"
    vocab: int = Field(default=50257, gt=0, le=MAX_VOCAB)
    seq_len: int = Field(gt=0, le=MAX_TOKENS)
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    rope: bool = False
    learned_positions: bool = False
    bias: bool = False
    mlp_bias: bool | None = Field(default=None, description="biases in the FFN; the same as "
                                                            "bias unless given")
    tied_embeddings: bool = False
    experts: int = Field(default=0, ge=0, le=2**16)
    top_k: int = Field(default=0, ge=0, le=2**16)
    qkv_bias: bool | None = Field(default=None, description="biases on the query, key and "
                                                            "value projections; the same as "
                                                            "bias unless given (Qwen2: true "
                                                            "with bias false)")
    qk_norm: Literal[False, "head", "full"] = Field(
        default=False, description="a norm of model.norm's kind on the queries and keys before "
                                   "attention. head (or true): over each head, its head_dim "
                                   "weights shared by the heads (Qwen3; Megatron-LM's "
                                   "--qk-layernorm); full: over all query heads and over all "
                                   "key heads of a token, weights of those widths (OLMo 2)")
    attention: Literal["flash", "unfused"] = Field(
        default="flash", description="flash: one fused kernel; unfused: baddbmm, masked softmax "
                                     "and bmm as Megatron-LM ran attention before FlashAttention")
    attention_dropout: float = Field(
        default=0.0, ge=0, lt=1, description="dropout on the attention probabilities; unfused "
                                             "attention then runs one more kernel over the "
                                             "a·s² scores (Megatron-LM's default is 0.1)")
    hidden_dropout: float = Field(
        default=0.0, ge=0, lt=1, description="dropout on the attention's and the FFN's output "
                                             "before each residual add (Megatron-LM's "
                                             "--hidden-dropout, 0.1 by default; GPT-2's "
                                             "resid_pdrop): a one-byte mask per element "
                                             "forward, its gradient backward")

    @field_validator("qk_norm", mode="before")
    @classmethod
    def _qk_norm_true_is_head(cls, value: Any) -> Any:
        return "head" if value is True else value

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads} "
                             f"(give model.head_dim when heads · head_dim differs from hidden)")
        if self.heads % self.kv:
            raise at_key("kv_heads", self.kv, f"kv_heads {self.kv} must divide heads "
                         f"{self.heads} (each key/value head serves an equal group of query "
                         f"heads)")
        if self.experts and not 0 < self.top_k <= self.experts:
            raise at_key("top_k", self.top_k, f"model.top_k={self.top_k} must be from 1 to "
                         f"model.experts={self.experts} (each token goes to top_k experts)")
        if self.top_k and not self.experts:
            raise at_key("top_k", self.top_k, f"model.top_k={self.top_k} has no effect without "
                         f"experts (model.experts=0): set model.experts for a MoE model, or "
                         f"drop top_k")
        return self

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def hd(self) -> int:
        """The width of one attention head."""
        return self.head_dim or self.hidden // self.heads

    @property
    def attn_width(self) -> int:
        """The width of all query heads (the attention output projection's input)."""
        return self.heads * self.hd

    @property
    def head_dim_shape(self) -> dict[str, int]:
        """``{"head_dim": ...}`` for op shapes when the heads' width is not hidden / heads, so
        standard models keep the shape parameters their op data was measured with."""
        return {"head_dim": self.hd} if self.attn_width != self.hidden else {}

    @property
    def ffn_width(self) -> int:
        return self.ffn or 4 * self.hidden


class TrainingConfig(_Strict):
    global_batch: int = Field(gt=0, le=2**40, description="sequences per optimizer step")
    micro_batch: int = Field(default=1, gt=0, le=MAX_TOKENS)
    dtype: Literal["fp16", "bf16", "fp32"] = "bf16"
    optimizer: Literal["adamw"] = "adamw"
    grads_fp32: bool = Field(
        default=False, description="gradients accumulated and reduced in fp32 (Megatron-LM "
                                   "under bf16, or --accumulate-allreduce-grads-in-fp32): 4 "
                                   "bytes a parameter in memory and on the wire")
    grad_accumulation_fusion: bool = Field(
        default=True, description="the weight-gradient GEMMs add into the gradient buffer "
                                  "themselves (Megatron-LM's default since 2022); false: each "
                                  "micro-batch's gradients are added to it in a memory-bound "
                                  "pass of their own (--no-gradient-accumulation-fusion, "
                                  "Megatron-LM before 2022)")

    @property
    def grad_bytes(self) -> int:
        return 4 if self.grads_fp32 or self.dtype == "fp32" else 2

    @property
    def weight_bytes(self) -> int:
        """Bytes of a weight (and of an activation) in the step's arithmetic."""
        return 4 if self.dtype == "fp32" else 2


class ParallelConfig(_Strict):
    dp: int = Field(default=1, gt=0)
    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0, description="expert parallelism: a MoE layer's experts are "
                                                 "spread over ep data-parallel ranks")
    virtual_stages: int = Field(default=1, gt=0)
    schedule: Literal["gpipe", "1f1b", "interleaved"] = "1f1b"
    sequence_parallel: bool = False
    zero: int = Field(default=1, ge=0, le=3)
    recompute: Literal["none", "selective", "full"] = "selective"
    dp_overlap: bool = True
    bucket_mb: float = Field(default=25.0, gt=0)


class ClusterConfig(_Strict):
    device: str = "H100"
    gpus_per_node: int = Field(default=8, gt=0)
    intra_bw_gbps: float = Field(default=450.0, gt=0, description="per-GPU, one direction")
    inter_bw_gbps: float = Field(default=50.0, gt=0, description="per-GPU network")
    intra_latency_us: float = Field(default=5.0, ge=0)
    inter_latency_us: float = Field(default=10.0, ge=0)
    nccl_data: str | None = Field(default=None, description="folder of measured NCCL samples, "
                                                            "or 'bundled'")
    memory_gib: float | None = Field(default=None, gt=0, description="memory per GPU in GiB; "
                                     "the catalog's figure when the device is in it (needed "
                                     "for a device known only from its data)")


class OpsConfig(_Strict):
    mode: Literal["data", "analytical"] = "analytical"
    data: str = "bundled"
    compute_efficiency: float = Field(default=0.7, gt=0, le=1)
    memory_efficiency: float = Field(default=0.8, gt=0, le=1)
    strict: bool = Field(default=False, description="data mode: an op without measured data is "
                                                    "an error instead of a roofline fallback")
    roofline: list[str] = Field(default=[], description="data mode: ops timed by the roofline "
                                "whatever the data holds (an op's name, or a catalog op's for "
                                "every op that runs it)")

    @field_validator("roofline")
    @classmethod
    def _known_ops(cls, names: list[str]) -> list[str]:
        if not names:
            return names
        from opatlas.ops.registry import get_op

        for name in names:
            try:
                get_op(name)
            except OpatlasError as exc:  # names the op and the known ones
                raise ValueError(str(exc)) from None
        return names


class TrainConfig(_Strict):
    model: ModelConfig
    training: TrainingConfig
    parallel: ParallelConfig = ParallelConfig()
    cluster: ClusterConfig = ClusterConfig()
    ops: OpsConfig = OpsConfig()
    source: Literal["opatlas", "ett"] = "opatlas"

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        p, m, t = self.parallel, self.model, self.training
        if (why := tokens_rule(t.micro_batch, m.seq_len)) is not None:
            raise ValueError(why)
        if (why := tp_split_rule(m, p.tp)) is not None:
            raise at_key("parallel.tp", p.tp, why)
        if (why := ffn_split_rule(m, p.tp)) is not None:
            width = "" if m.ffn else f" (4 · model.hidden {m.hidden})"
            raise at_key("parallel.tp", p.tp, f"model.{why}{width}: Megatron-LM splits the "
                         f"FFN's width over the tensor-parallel ranks")
        if p.pp * p.virtual_stages > m.layers:
            raise ValueError(f"parallel.pp={p.pp} · parallel.virtual_stages={p.virtual_stages} "
                             f"exceeds model.layers={m.layers} (each pipeline chunk takes "
                             f"whole layers)")
        if t.global_batch % (p.dp * t.micro_batch):
            raise ValueError(f"training.global_batch={t.global_batch} is not a multiple of "
                             f"parallel.dp={p.dp} · training.micro_batch={t.micro_batch} = "
                             f"{p.dp * t.micro_batch}")
        if (why := moe_rule(m, p.ep)) is not None:
            raise at_key("parallel.ep", p.ep, f"{why}; model.experts={m.experts}")
        if p.ep > 1 and (m.experts % p.ep or p.dp % p.ep):
            raise at_key("parallel.ep", p.ep, f"ep {p.ep} must divide both experts {m.experts} "
                         f"and dp {p.dp} (model.experts, parallel.dp: expert-parallel groups are "
                         f"formed inside data parallelism)")
        if (why := schedule_rule(p.schedule, p.virtual_stages, p.pp)) is not None:
            raise ValueError(why)
        if p.schedule == "interleaved" and m.layers % (p.pp * p.virtual_stages):
            # Megatron-LM splits every stage into equal chunks and asserts it
            raise ValueError(f"the interleaved schedule needs layers ({m.layers}) to split "
                             f"into pp·virtual_stages = {p.pp * p.virtual_stages} equal chunks")
        if p.schedule == "interleaved" and self.micro_batches % p.pp:
            # Megatron-LM's interleaved 1F1B runs micro-batches in groups of pp and asserts it
            raise ValueError(f"the interleaved schedule needs micro-batches per step "
                             f"({self.micro_batches}) to be a multiple of pp ({p.pp})")
        return self

    @property
    def gpus(self) -> int:
        return self.parallel.dp * self.parallel.tp * self.parallel.pp

    @property
    def micro_batches(self) -> int:
        return self.training.global_batch // (self.parallel.dp * self.training.micro_batch)


# estimate-train-time's config keys: its docs/configuration.md and examples (save_folder and
# save_name, where its older examples had results written, change no estimate)
ETT_KEYS = ("gpu_name", "operator_data_folder", "nccl_data_folder", "training_config",
            "comm_bucket", "encoders", "function_list", "encoder_function_list",
            "layernorm_name", "fwd_syncs", "bwd_syncs", "save_folder", "save_name")
# training_config's entries, in order
ETT_TRAINING = ("pp", "mp", "dp", "b", "h", "l", "dim", "steps_per_update", "gpus_per_node")
ETT_NORMS = ("RMSlayernorm", "layernorm")
# the ops its function lists name: those its kernel sampler measures for a model
ETT_FUNCTIONS = ("embedding", *ETT_NORMS, "linear1", "linear2", "linear3", "linear4",
                 "linear_final", "RoPE", "flash_atten", "gelu", "res_add",
                 "parallel_cross_entropy_128", "softmax", "fillmask", "baddbmm", "bmm",
                 "ScaledUpperTriangMaskedSoftmax")
# what from_ett assumes for a key that upstream requires and a file leaves out
ETT_DEFAULTS = {"gpu_name": "NVIDIAA100-SXM4-80GB", "layernorm_name": "layernorm",
                "encoder_function_list": [], "comm_bucket": 1260000000}
# the keys of ours from_ett sets from one of upstream's, as errors name them
ETT_SOURCES = {"model.layers": "encoders", "model.hidden": "training_config.dim",
               "model.heads": "training_config.h", "model.seq_len": "training_config.l",
               "training.micro_batch": "training_config.b", "parallel.dp": "training_config.dp",
               "parallel.tp": "training_config.mp", "parallel.pp": "training_config.pp",
               "cluster.gpus_per_node": "training_config.gpus_per_node",
               "cluster.device": "gpu_name"}
ETT_SYNCS = 2  # the tensor-parallel all-reduces a layer runs forward, and backward


def _ett_folder(data: dict[str, Any], key: str, config_dir: Path | None,
                notes: list[str] | None, strict: bool, file: str) -> str:
    """An upstream data folder, absolute or relative to the config as upstream resolves it;
    'bundled' (the A100 samples, which upstream's Perlmutter folders are) when it is not
    given, names upstream's Perlmutter folder, or is not there; the last is said in
    ``notes`` and is an error under ``strict``. A device the bundled data lacks is then an
    error that names what it holds."""
    value = data.get(key)
    for c in (Path(str(value)), *([config_dir / str(value)] if config_dir else [])):
        if value and c.is_dir():
            return str(c.resolve())
    if value and Path(str(value)).parts[-3:-1] != ("regressors", "Perlmutter"):
        # upstream's own Perlmutter folders hold the samples opatlas bundles: no substitute
        where = f" nor next to the config in {config_dir}" if config_dir else ""
        msg = f"is not a folder as given{where}"
        if strict:
            raise SpecError(f"{msg} (--strict refuses the bundled data instead)",
                            file=file, key=key, value=value)
        if notes is not None:
            notes.append(f"{key} {value} {msg}: the bundled A100 samples are used instead")
    return "bundled"


def _check_ett(data: dict[str, Any], file: str) -> None:
    """Every key of an upstream config known and of its type, before any is converted: an
    error names the key as the file gives it (training_config.mp) and the value written."""
    for key, value in data.items():
        if key not in ETT_KEYS:
            raise SpecError(_unknown("key", str(key), ETT_KEYS, "estimate-train-time's config"),
                            file=file, key=str(key), value=value)
    for key in ("training_config", "encoders"):
        if key not in data:
            raise SpecError("missing: estimate-train-time's config requires it", file=file,
                            key=key)
    given = data["training_config"]
    if not isinstance(given, list) or len(given) != len(ETT_TRAINING):
        raise SpecError(f"expected a list of {len(ETT_TRAINING)} integers "
                        f"[{', '.join(ETT_TRAINING)}]", file=file, key="training_config",
                        value=given)
    counts = {f"training_config.{k}": v for k, v in zip(ETT_TRAINING, given, strict=True)}
    counts["encoders"] = data["encoders"]
    counts.update({k: data[k] for k in ("fwd_syncs", "bwd_syncs") if k in data})
    for key, value in counts.items():
        least = 0 if key.endswith("_syncs") else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SpecError(f"expected an integer >= {least}", file=file, key=key, value=value)
    bucket = data.get("comm_bucket", 1)
    if isinstance(bucket, bool) or not isinstance(bucket, int | float) or not 0 < bucket < 2**63:
        raise SpecError("expected a positive number of bytes", file=file, key="comm_bucket",
                        value=bucket)
    for key in ("gpu_name", "operator_data_folder", "nccl_data_folder"):
        if key in data and (not isinstance(data[key], str) or not data[key].strip()):
            raise SpecError("expected a name" if key == "gpu_name" else "expected a folder",
                            file=file, key=key, value=data[key])
    names = [("layernorm_name", data["layernorm_name"], ETT_NORMS)] \
        if "layernorm_name" in data else []
    for key in ("function_list", "encoder_function_list"):
        if not isinstance(data.get(key, []), list):
            raise SpecError("expected a list of op names", file=file, key=key, value=data[key])
        names += [(key, name, ETT_FUNCTIONS) for name in data.get(key, [])]
    for key, name, known in names:
        if name not in known:
            what = "norm" if key == "layernorm_name" else "op"
            raise SpecError(_unknown(what, str(name), known, key), file=file, key=key,
                            value=name)


def _ett_assumed(data: dict[str, Any], file: str, notes: list[str] | None,
                 strict: bool) -> None:
    """What the conversion assumes or leaves unused, said in ``notes``; an error under
    ``strict``: a key upstream requires that the file leaves out, and a number of
    tensor-parallel syncs other than the layer's (opatlas times those of the layer it
    models)."""
    shown = {**ETT_DEFAULTS, "encoder_function_list": "[] (attention unfused, no RoPE)"}
    said = [(k, None, f"missing: estimate-train-time's config requires it; assumed {k} = "
                      f"{shown[k]}") for k in ETT_DEFAULTS if k not in data]
    said += [(k, data[k], f"{k} {data[k]} is not used: opatlas times the tensor-parallel "
                          f"all-reduces of the Megatron-LM layer it models ({ETT_SYNCS} a "
                          f"layer forward, {ETT_SYNCS} backward)")
             for k in ("fwd_syncs", "bwd_syncs") if data.get(k, ETT_SYNCS) != ETT_SYNCS]
    for key, value, msg in said:
        if strict:
            raise SpecError(f"{msg} (--strict refuses it)", file=file, key=key, value=value)
        if notes is not None:
            notes.append(msg if value is not None else f"{key} {msg}")


def from_ett(data: dict[str, Any], config_dir: Path | None = None,
             notes: list[str] | None = None, strict: bool = False,
             file: str | None = None) -> dict[str, Any]:
    """estimate-train-time's example config -> our mapping, keeping upstream's model
    assumptions (GELU FFN of 4·dim, vocab 50,257, MHA, fp16, full recompute, ZeRO-1, AFAB,
    no DP overlap, no sequence parallelism) so the comparison with its published numbers is
    like for like. A layer whose function list has no ``flash_atten`` runs attention unfused
    (baddbmm, masked softmax, bmm). Errors name ``file`` (the config; its name is the
    model's)."""
    where = file or "config"
    _check_ett(data, where)
    given = {**ETT_DEFAULTS, **data}
    pp, mp, dp, b, h, l, dim, steps, gpn = data["training_config"]
    funcs = given["encoder_function_list"]
    norm = "rmsnorm" if given["layernorm_name"] == "RMSlayernorm" else "layernorm"
    folders = {k: _ett_folder(data, k, config_dir, notes, strict, where)
               for k in ("nccl_data_folder", "operator_data_folder")}
    _ett_assumed(data, where, notes, strict)
    return {
        "model": {"name": Path(file).stem if file else "ett", "layers": data["encoders"],
                  "hidden": dim, "heads": h, "seq_len": l, "vocab": 50257, "norm": norm,
                  "rope": "RoPE" in funcs, "ffn_kind": "gelu",
                  "attention": "flash" if "flash_atten" in funcs else "unfused"},
        "training": {"global_batch": b * steps * dp, "micro_batch": b, "dtype": "fp16"},
        "parallel": {"dp": dp, "tp": mp, "pp": pp, "schedule": "gpipe", "zero": 1,
                     "sequence_parallel": False,
                     "recompute": "full", "dp_overlap": False,
                     "bucket_mb": given["comm_bucket"] * 2 / 2**20},
        "cluster": {"device": given["gpu_name"], "gpus_per_node": gpn,
                    "nccl_data": folders["nccl_data_folder"]},
        "ops": {"mode": "data", "data": folders["operator_data_folder"]},
        "source": "ett",
    }


def upstream_names(exc: SpecError, raw: dict[str, Any], given: Collection[str] = ()
                   ) -> SpecError:
    """``exc`` in the words of the estimate-train-time config ``raw`` was converted from: its
    keys (training_config.mp for parallel.tp ...) for ours, but those ``given`` by --set."""
    from opatlas.estimate.overrides import SOURCE

    if raw.get("source") != "ett" or exc.file == SOURCE:
        return exc
    names = {k: v for k, v in ETT_SOURCES.items() if k not in given}
    detail = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b",
                    lambda found: names[found[1]], exc.detail) if names else exc.detail
    key, value = names.get(exc.key or "", exc.key), exc.value
    if exc.key == "training.global_batch" and exc.key not in given:  # of three entries
        key, value = "training_config", None
        detail = f"the global batch b·steps_per_update·dp = {exc.value}: {detail}"
    return SpecError(detail, file=exc.file, key=key, value=value)


def load_config(path: str | Path, notes: list[str] | None = None) -> TrainConfig:
    """A config file or bundled example, validated; ``notes`` (if given) receives what was
    assumed on the way (Hugging Face defaults, cluster presets)."""
    data, path = read_config(path, notes)
    try:
        return validate_config(data, path, notes)
    except SpecError as exc:
        raise upstream_names(exc, data) from None


def read_config(path: str | Path, notes: list[str] | None = None,
                strict: bool = False) -> tuple[dict[str, Any], Path]:
    """The raw mapping of a config file or bundled example (estimate-train-time's and Hugging
    Face's formats converted), not yet validated, and the file it came from. ``notes``
    receives what the conversion substituted (an upstream data folder that is not there);
    ``strict`` makes that an error."""
    path = Path(path)
    if not path.exists():
        from importlib import resources

        from opatlas.estimate.hf import bundled_hf

        bundled = resources.files("opatlas") / "data" / "configs" / f"{path.name.removesuffix('.yml')}.yml"
        if bundled.is_file():
            path = Path(str(bundled))
        elif (hf := bundled_hf(path.name)) is not None:
            path = hf
        else:
            raise SpecError(f"no such config file, and no bundled example of that name"
                            f"{_bundled_hint(path.name)}", file=str(path))
    if path.is_dir():  # a Hugging Face model folder
        if not (path / "config.json").is_file():
            from opatlas.estimate.sources import FOLDER_HOLDS

            raise SpecError(f"a folder without config.json ({FOLDER_HOLDS})", file=str(path))
        path = path / "config.json"
    try:
        data = _parse(path)
    except (OSError, UnicodeDecodeError) as exc:  # a folder, unreadable, not text
        raise SpecError(f"cannot read the config: {exc.strerror if isinstance(exc, OSError) else exc}",
                        file=str(path)) from None
    if data is None:  # YAML of nothing but blanks or comments
        raise SpecError("the file is empty: a config is a YAML mapping with model and training "
                        "sections", file=str(path))
    if not isinstance(data, dict):
        raise SpecError("a config must be a YAML mapping", file=str(path))
    if "model" not in data and ("op" in data or "module_name" in data):
        raise SpecError("this is a sweep spec (what `opatlas run` measures), not a training "
                        "config: give a config with model, training, parallel and cluster "
                        "sections, a Hugging Face config.json or a bundled example",
                        file=str(path))
    if "training_config" in data:  # checked whole: errors name upstream's keys
        data = from_ett(data, path.parent, notes, strict, file=str(path))
    from opatlas.estimate.hf import is_hf_config

    if is_hf_config(data):
        data = {"model": {"hf": str(path)}}
    return data, path


def bundled_names() -> list[str]:
    """The bundled examples a config can be named by: opatlas YAMLs and Hugging Face
    config.json files."""
    from importlib import resources

    data = resources.files("opatlas") / "data"
    return sorted({Path(f.name).stem for d, ext in (("configs", ".yml"), ("hf", ".json"))
                   for f in (data / d).iterdir() if f.name.endswith(ext)})


def _bundled_hint(name: str) -> str:
    """The bundled names nearest ``name`` (``llama2_7b``: llama2-7b), else all of them."""
    import difflib

    names = bundled_names()
    stem = re.sub(r"\.(yml|yaml|json)$", "", name)
    by_key = {n.replace("_", "-").lower(): n for n in names}
    key = stem.replace("_", "-").lower()
    near = [key] if key in by_key else difflib.get_close_matches(key, list(by_key), n=3,
                                                                 cutoff=0.75)
    if near:
        return f" (did you mean {' or '.join(repr(by_key[n]) for n in near)}?)"
    return f"; the bundled examples are {', '.join(names)}"


def _parse(path: Path) -> Any:
    """A .json file as JSON (its errors are JSON's: line and column), anything else as YAML."""
    text = path.read_text()
    if path.suffix.lower() != ".json":
        return load_yaml(text, str(path))
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                        file=str(path)) from None


def validate_config(data: dict[str, Any], path: str | Path,
                    notes: list[str] | None = None, analytical: bool = False) -> TrainConfig:
    """Resolve ``model.hf`` and ``cluster.preset`` in a raw mapping, then validate it, with a
    device its ops can be timed on (``analytical``: by the roofline, whatever ops.mode says,
    as --analytical times them); errors name ``path``."""
    from opatlas.estimate.optimes import device_problem
    from opatlas.estimate.sources import resolve_sources

    data = resolve_sources(data, Path(path), notes)
    try:
        cfg = TrainConfig.model_validate(data)
    except ValidationError as exc:
        err = _first_error(exc.errors())
        key = ".".join(str(p) for p in err["loc"]) or None
        value = err.get("input")
        # a rule across keys (heads vs tp, ...) names the keys itself: no echo of the mapping
        value = None if isinstance(value, dict) else value
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = _unknown_key(err["loc"])
        raise SpecError(msg, file=str(path), key=key, value=value) from None
    device = cfg.cluster.device
    if (why := device_problem(device, cfg.training.dtype, cfg.ops, analytical)) is not None:
        raise SpecError(why, file=str(path), key="cluster.device", value=device)
    return cfg


def _first_error(errors: Sequence[Any]) -> Any:
    """The error to report: pydantic's first, but an unknown key that is a near miss of a
    required key reported missing beside it (``hiden`` for ``hidden``) before that key: the
    typo is the cause, the missing field its effect."""
    import difflib

    missing = [e["loc"] for e in errors if e["type"] == "missing"]
    for err in errors:
        loc = err["loc"]
        if err["type"] != "extra_forbidden" or not loc:
            continue
        near = [m[-1] for m in missing if m[:-1] == loc[:-1]]
        if difflib.get_close_matches(str(loc[-1]), [str(n) for n in near], n=1):
            return err
    return errors[0]


def _unknown_key(loc: tuple) -> str:
    """A key no section takes: the keys it does take, and the nearest one."""
    sections: dict[str, type[BaseModel]] = {
        "model": ModelConfig, "training": TrainingConfig, "parallel": ParallelConfig,
        "cluster": ClusterConfig, "ops": OpsConfig}
    section = sections.get(str(loc[0])) if len(loc) == 2 else TrainConfig
    if section is None:
        return "unknown key"
    known = list(section.model_fields)
    known += {ClusterConfig: ["preset"], ModelConfig: ["hf"]}.get(section, [])
    return _unknown("key", str(loc[-1]), known, ".".join(map(str, loc[:-1])) or "the config")


def _unknown(what: str, name: str, known: Sequence[str], taker: str) -> str:
    """``name`` is no ``what`` that ``taker`` takes: those it takes, and the nearest one."""
    import difflib

    near = difflib.get_close_matches(name, known, n=1)
    return (f"unknown {what}{f' (did you mean {near[0]!r}?)' if near else ''}; "
            f"{taker} takes {', '.join(known)}")
