"""Megatron-LM launch arguments as a training config.

``--num-layers 96 --hidden-size 12288 ... --tensor-model-parallel-size 8 --bf16`` (a string,
or ``@args.txt``; a whole ``torchrun ... pretrain_gpt.py ...`` line works too, its launcher
part giving the GPU count) becomes the raw mapping of a :class:`TrainConfig`, with
Megatron-LM's own defaults for what the line leaves out: learned absolute positions,
LayerNorm, biases, tied embeddings, an FFN of 4·h (int(8h/3 / 64)·64 with SwiGLU), fp32 without
``--fp16``/``--bf16``, no recomputation, replicated optimizer states without
``--use-distributed-optimizer``, gradients reduced in one bucket after the backward without
``--overlap-grad-reduce`` (or the legacy ``--DDP-impl torch``: PyTorch's DDP, whose 25 MB
buckets overlap the backward), a vocabulary padded to a multiple of 128·tp, a global batch of
micro-batch · dp, dropout of 0.1 on the attention probabilities and on the hidden state.
Attention is unfused unless ``--use-flash-attn`` or a fused ``--attention-backend`` is given.

Every other flag is accounted for (:mod:`opatlas.estimate.megatron_flags`): listed as having
no effect, listed as not modelled, or refused with an error naming it; so is a flag opatlas
does not know, since it may be a typo of one that matters.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from opatlas.errors import SpecError
from opatlas.estimate import megatron_flags as mf
from opatlas.estimate.config import ModelConfig

SOURCE = "--megatron-args"
GPT2_BPE_VOCAB = 50257  # the GPT-2 BPE tokenizer's vocabulary, before Megatron's padding
MEGATRON_DROPOUT = 0.1  # --attention-dropout and --hidden-dropout when not given


@dataclass
class MegatronRun:
    """The raw config mapping, what was assumed, the flags left unused, and the run length
    the line asks for (``--train-iters``, or ``--train-samples`` over the global batch)."""

    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    no_effect: list[str] = field(default_factory=list)
    not_modelled: list[str] = field(default_factory=list)
    steps: int | None = None

    def report(self) -> list[str]:
        out = list(self.notes)
        if self.no_effect:
            out.append("Megatron flags with no effect on the estimate: "
                       + " ".join(f"--{f}" for f in self.no_effect))
        if self.not_modelled:
            out.append("Megatron flags not modelled (the estimate is the run without them): "
                       + " ".join(f"--{f}" for f in self.not_modelled))
        return out


def read_args(text: str) -> tuple[list[str], str]:
    """The argument tokens of ``text`` (or of the file ``@path``) and a label for errors."""
    label = SOURCE
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise SpecError(f"cannot read the arguments file: {exc.strerror}",
                            file=str(path)) from None
        label = str(path)
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as exc:
        raise SpecError(f"cannot split the arguments: {exc}", file=label) from None
    return [t for t in tokens if t.strip()], label


def _is_flag(token: str) -> bool:
    return token.startswith("--")


def parse_flags(tokens: list[str], label: str, repeats: list[str] | None = None
                ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(Megatron flags, launcher flags): each flag with the values after it; a later flag of
    the same name wins, as in argparse (``repeats`` collects a line saying so for each).
    Tokens before a ``*.py`` script are the launcher's."""
    script = next((i for i, t in enumerate(tokens) if t.endswith(".py")), None)
    launcher = _group(tokens[:script], label, strict=False) if script is not None else {}
    return (_group(tokens[script + 1 if script is not None else 0:], label, strict=True,
                   repeats=repeats), launcher)


def _group(tokens: list[str], label: str, strict: bool,
           repeats: list[str] | None = None) -> dict[str, list[str]]:
    flags: dict[str, list[str]] = {}
    current: str | None = None
    for token in tokens:
        if _is_flag(token):
            name, eq, value = token[2:].partition("=")
            if repeats is not None and name in flags:
                repeats.append(name)
            current = name
            flags[name] = [value] if eq else []
        elif current is not None:
            flags[current].append(token)
        elif strict:
            raise SpecError("expected a --flag; Megatron-LM takes no positional arguments",
                            file=label, value=token)
    return flags


class _Args:
    """Typed access to the parsed flags; remembers which were used."""

    def __init__(self, flags: dict[str, list[str]], label: str) -> None:
        self.flags, self.label, self.used = flags, label, set()

    def has(self, *names: str) -> bool:
        return any(n in self.flags for n in names)

    def switch(self, name: str) -> bool:
        if name not in self.flags:
            return False
        self.used.add(name)
        if self.flags[name]:
            raise SpecError("this flag takes no value", file=self.label, key=f"--{name}",
                            value=" ".join(self.flags[name]))
        return True

    def text(self, *names: str) -> str | None:
        for name in names:
            if name in self.flags:
                self.used.add(name)
                values = self.flags[name]
                if len(values) != 1:
                    raise SpecError("expected exactly one value", file=self.label,
                                    key=f"--{name}", value=" ".join(values) or None)
                return values[0]
        return None

    def values(self, name: str) -> list[str] | None:
        if name not in self.flags:
            return None
        self.used.add(name)
        return self.flags[name]

    def int(self, *names: str, minimum: int = 1) -> int | None:
        value = self.text(*names)
        if value is None:
            return None
        try:
            number = int(value)
        except ValueError:
            number = minimum - 1
        if number < minimum:
            raise SpecError(f"expected an integer >= {minimum}", file=self.label,
                            key=f"--{next(n for n in names if n in self.flags)}", value=value)
        return number

    def fraction(self, name: str, default: float, notes: list[str]) -> float:
        """A probability in [0, 1), such as a dropout; Megatron-LM's default when absent
        (said in the notes)."""
        value = self.text(name)
        if value is None:
            notes.append(f"--{name} {default} (Megatron-LM's default)")
            return default
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not 0 <= number < 1:
            raise SpecError("expected a probability in [0, 1)", file=self.label,
                            key=f"--{name}", value=value)
        return number

    def required(self, name: str, why: str) -> int:
        value = self.int(name)
        if value is None:
            raise SpecError(f"missing: {why}", file=self.label, key=f"--{name}")
        return value

    def refuse(self, name: str, why: str) -> SpecError:
        return SpecError(f"{why}; opatlas refuses to estimate a different run", file=self.label,
                         key=f"--{name}", value=" ".join(self.flags.get(name, [])) or None)


def _vocab(a: _Args, tp: int, notes: list[str]) -> int:
    """Megatron's padded vocabulary: the tokenizer's size rounded up to a multiple of
    make-vocab-size-divisible-by · tp (``--padded-vocab-size`` taken as is)."""
    padded = a.int("padded-vocab-size")
    if padded is not None:
        return padded
    size = a.int("vocab-size")
    tokenizer = a.text("tokenizer-type")
    has_merges = a.text("merge-file") is not None
    a.text("vocab-file")
    if size is None and (tokenizer == "GPT2BPETokenizer" or (tokenizer is None and has_merges)):
        size = GPT2_BPE_VOCAB
        notes.append(f"vocabulary: GPT-2 BPE, {GPT2_BPE_VOCAB} tokens before padding")
    if size is None:
        raise SpecError("the vocabulary size is unknown (opatlas does not open tokenizer files): "
                        "add --vocab-size N, the tokenizer's size before padding",
                        file=a.label, key="--vocab-size")
    multiple = (a.int("make-vocab-size-divisible-by") or 128) * tp
    return math.ceil(size / multiple) * multiple


def _shape(a: _Args, notes: list[str]) -> dict[str, Any]:
    """Layers, widths, heads and query groups, sequence length."""
    layers = a.int("num-layers", "encoder-num-layers")
    if layers is None:
        raise SpecError("missing: the number of layers", file=a.label, key="--num-layers")
    hidden = a.required("hidden-size", "the hidden size")
    heads = a.required("num-attention-heads", "the number of attention heads")
    head_dim = a.int("kv-channels")  # Megatron-LM's name for the width of one head
    if head_dim is None and hidden % heads:
        raise SpecError(f"--hidden-size {hidden} is not divisible by it (give --kv-channels, "
                        f"the width of one head, when heads · head width differs from the "
                        f"hidden size)", file=a.label, key="--num-attention-heads", value=heads)
    seq_len = a.int("seq-length", "encoder-seq-length")
    if seq_len is None:
        raise SpecError("missing: the sequence length", file=a.label, key="--seq-length")
    groups = a.int("num-query-groups")
    if a.switch("group-query-attention"):
        kv = groups or 1  # Megatron-LM's default: one group
        if groups is None:
            notes.append("--group-query-attention without --num-query-groups: one key/value "
                         "group (Megatron-LM's default), i.e. multi-query attention")
    else:
        kv = None
        if groups is not None:
            notes.append("--num-query-groups without --group-query-attention: Megatron-LM "
                         "ignores it (multi-head attention)")
    if kv is not None and heads % kv:
        raise SpecError(f"--num-attention-heads {heads} is not a multiple of it (each query "
                        f"group serves the same number of attention heads)", file=a.label,
                        key="--num-query-groups", value=kv)
    return {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv,
            "seq_len": seq_len, **({"head_dim": head_dim} if head_dim is not None else {})}


def _ffn(a: _Args, hidden: int, notes: list[str]) -> dict[str, Any]:
    swiglu = a.switch("swiglu")
    squared_relu, quick_geglu = a.switch("squared-relu"), a.switch("quick-geglu")
    gated = swiglu or quick_geglu
    if squared_relu or quick_geglu:
        notes.append(f"{'squared ReLU' if squared_relu else 'quick GeGLU'} is timed as "
                     f"{'GELU' if squared_relu else 'SwiGLU'} (same shapes)")
    ffn = a.int("ffn-hidden-size")
    if ffn is None:
        ffn = int(4 * hidden * 2 / 3 / 64) * 64 if gated else 4 * hidden
        notes.append(f"ffn = {ffn} (Megatron-LM's default{' for SwiGLU' if gated else ''})")
    return {"ffn": ffn, "ffn_kind": "swiglu" if gated else "gelu"}


def _model(a: _Args, tp: int, notes: list[str]) -> dict[str, Any]:
    shape = _shape(a, notes)
    max_pos = a.int("max-position-embeddings")
    if max_pos is not None and max_pos < shape["seq_len"]:
        raise SpecError(f"shorter than --seq-length {shape['seq_len']} (Megatron-LM stops on it)",
                        file=a.label, key="--max-position-embeddings", value=max_pos)
    position = _positions(a)
    norm = a.text("normalization") or "LayerNorm"
    if norm not in ("LayerNorm", "RMSNorm"):
        raise SpecError("expected LayerNorm or RMSNorm", file=a.label, key="--normalization",
                        value=norm)
    model: dict[str, Any] = {
        "name": "megatron", **shape, **_ffn(a, shape["hidden"], notes),
        "vocab": _vocab(a, tp, notes), "norm": norm.lower(),
        "rope": position == "rope", "learned_positions": position == "learned_absolute",
        "bias": not a.switch("disable-bias-linear"),
        "qkv_bias": True if a.switch("add-qkv-bias") else None,
        "tied_embeddings": not a.switch("untie-embeddings-and-output-weights"),
        "qk_norm": a.switch("qk-layernorm"), "attention": _attention(a, notes),
        "attention_dropout": a.fraction("attention-dropout", MEGATRON_DROPOUT, notes),
        "hidden_dropout": a.fraction("hidden-dropout", MEGATRON_DROPOUT, notes),
        **_experts(a, notes)}
    if position == "learned_absolute" and max_pos is not None and max_pos != shape["seq_len"]:
        notes.append(f"the learned position table is counted at --seq-length {shape['seq_len']} "
                     f"rows, not --max-position-embeddings {max_pos}")
    expert_ffn = a.int("moe-ffn-hidden-size")
    if model["experts"] and expert_ffn is not None:
        model["ffn"] = expert_ffn
    return {k: v for k, v in model.items() if v is not None}


def _positions(a: _Args) -> str:
    kind = a.text("position-embedding-type")
    if a.switch("use-rotary-position-embeddings"):
        kind = "rope"
    if a.switch("no-position-embedding") and kind != "rope":
        kind = "none"
    kind = kind or "learned_absolute"
    if kind not in ("learned_absolute", "rope", "none"):
        raise a.refuse("position-embedding-type", f"{kind} position embeddings are not modelled")
    return kind


def _attention(a: _Args, notes: list[str]) -> str:
    backend = a.text("attention-backend")
    if a.switch("use-flash-attn") or backend in ("flash", "fused"):
        return "flash"
    if backend == "auto":
        notes.append("--attention-backend auto: Transformer Engine picks a fused attention "
                     "kernel; estimated as flash attention")
        return "flash"
    if backend not in (None, "unfused", "local"):
        raise SpecError("expected flash, fused, unfused, local or auto", file=a.label,
                        key="--attention-backend", value=backend)
    if backend is None:
        notes.append("no --use-flash-attn: attention unfused (scores, softmax and their "
                     "product as separate kernels, as Megatron-LM ran it before FlashAttention)")
    return "unfused"


def _experts(a: _Args, notes: list[str]) -> dict[str, Any]:
    experts = a.int("num-experts", minimum=0) or 0
    top_k = a.int("moe-router-topk")
    if not experts:
        return {"experts": 0, "top_k": 0}
    if top_k is None:
        top_k = 2
        notes.append("--moe-router-topk 2 (Megatron-LM's default)")
    if top_k > experts:
        raise SpecError(f"exceeds --num-experts {experts} (a token goes to top-k distinct "
                        f"experts)", file=a.label, key="--moe-router-topk", value=top_k)
    return {"experts": experts, "top_k": top_k}


def _recompute(a: _Args, layers_per_chunk: int, notes: list[str]) -> str:
    """none | selective | full, from the current and the 2021-era flag spellings."""
    granularity = a.text("recompute-granularity")
    if a.switch("recompute-activations"):
        granularity = "selective"
    method = a.text("recompute-method", "activations-checkpoint-method")
    if a.switch("checkpoint-activations"):
        granularity, method = "full", method or "uniform"
    elif method is not None and granularity is None and a.has("activations-checkpoint-method"):
        granularity = "full"
    count = a.int("recompute-num-layers", "activations-checkpoint-num-layers",
                  "checkpoint-num-layers")
    if granularity is None:
        return "none"
    if granularity == "selective":
        modules = a.values("recompute-modules")
        if modules not in (None, [], ["core_attn"]):
            raise a.refuse("recompute-modules", "recomputing modules other than core_attn is "
                                                "not modelled")
        return "selective"
    if granularity != "full":
        raise SpecError("expected full or selective", file=a.label, key="--recompute-granularity",
                        value=granularity)
    if method not in ("uniform", "block"):
        raise SpecError("full recomputation needs a method (uniform or block); Megatron-LM "
                        "stops without one", file=a.label, key="--recompute-method", value=method)
    count = count or 1
    if method == "block" and count < layers_per_chunk:
        raise a.refuse("recompute-num-layers", f"recomputing {count} of the {layers_per_chunk} "
                                               f"layers of each stage is not modelled")
    if method == "uniform" and count > 1:
        notes.append(f"uniform recomputation in chunks of {count} layers: memory counted per "
                     f"layer (a chunk keeps only its input)")
    return "full"


def _zero(a: _Args, notes: list[str]) -> int:
    strategy = a.text("data-parallel-sharding-strategy") or "no_shard"
    no_reshard = a.switch("torch-fsdp2-no-reshard-after-forward")
    if a.switch("use-megatron-fsdp"):
        zero = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}.get(strategy)
        if zero is None:
            raise SpecError("expected no_shard, optim, optim_grads or optim_grads_params",
                            file=a.label, key="--data-parallel-sharding-strategy", value=strategy)
        return zero
    if a.switch("use-torch-fsdp2"):
        return 2 if no_reshard else 3
    if a.switch("use-distributed-optimizer"):
        return 1
    notes.append("no --use-distributed-optimizer: optimizer states replicated (ZeRO 0)")
    return 0


def _check_refused(a: _Args) -> None:
    for name, values in a.flags.items():
        if name in mf.REFUSED:
            raise a.refuse(name, mf.REFUSED[name])
        if name in mf.NEUTRAL:
            a.used.add(name)
            if len(values) != 1 or values[0] not in mf.NEUTRAL[name]:
                raise a.refuse(name, mf.NEUTRAL_WHY[name])
        if name in mf.REFUSED_UNLESS:
            taken, why = mf.REFUSED_UNLESS[name]
            if len(values) != 1 or values[0] not in taken:
                raise a.refuse(name, why)


def _sort_rest(a: _Args, run: MegatronRun, strict: bool) -> None:
    for name in a.flags:
        if name in a.used:
            continue
        if name in mf.NO_EFFECT or name.startswith(mf.NO_EFFECT_PREFIXES):
            run.no_effect.append(name)
        elif name in mf.NOT_MODELLED and strict:
            raise SpecError("the estimator does not model this flag (strict mode)",
                            file=a.label, key=f"--{name}")
        elif name in mf.NOT_MODELLED:
            run.not_modelled.append(name)
        else:
            raise SpecError("not a Megatron-LM flag opatlas knows; it may change the run (or be "
                            "a typo of one that does), so opatlas stops rather than ignore it. "
                            "Remove it if it does not change the step", file=a.label,
                            key=f"--{name}")


def _world(a: _Args, launcher: dict[str, list[str]], gpus: int | None,
           gpus_per_node: int | None, notes: list[str]) -> tuple[int | None, int | None]:
    """GPUs and GPUs per node: the caller's, else a torchrun/launcher prefix's. The launcher's
    GPUs per node is said: it is the run's, and a cluster preset does not replace it."""
    nnodes = (launcher.get("nnodes") or [""])[0]
    if nnodes and not nnodes.isdigit():  # elastic MIN:MAX
        raise SpecError("an elastic node range: the world size is not fixed; give a node count "
                        "or --gpus N", file=a.label, key="--nnodes", value=nnodes)
    per_node = _launcher_count(launcher, a.label, "nproc-per-node", "nproc_per_node")
    nodes = _launcher_count(launcher, a.label, "nnodes")
    launched = per_node * (nodes or 1) if per_node is not None else None
    if gpus is None:
        gpus = launched
    elif launched is not None and launched != gpus:
        notes.append(f"--gpus {gpus} replaces the launcher's {nodes or 1} node(s) × "
                       f"{per_node} = {launched} GPUs")
    if per_node is not None and gpus_per_node not in (None, per_node):
        notes.append(f"--gpus-per-node {gpus_per_node} replaces the launcher's "
                     f"--nproc-per-node {per_node}")
    elif per_node is not None:
        notes.append(f"GPUs per node: the launcher's --nproc-per-node {per_node}, kept over "
                     f"a cluster preset's (--gpus-per-node N or --set cluster.gpus_per_node=N "
                     f"to change)")
    return gpus, gpus_per_node or per_node


def _launcher_count(launcher: dict[str, list[str]], label: str, *names: str) -> int | None:
    """A launcher flag's count (``--nproc-per-node 8``); None when absent or not a number
    (torchrun's ``gpu``, ``auto``)."""
    for name in names:
        value = (launcher.get(name) or [""])[0]
        if value.isdigit():
            if int(value) < 1:
                raise SpecError("expected an integer >= 1", file=label, key=f"--{name}",
                                value=value)
            return int(value)
    return None


def launcher_gpus_per_node(text: str) -> int | None:
    """The GPUs per node a ``torchrun ... pretrain_gpt.py ...`` line's launcher part gives
    (``--nproc-per-node``), or None: a caller passes it on as ``--gpus-per-node`` so that it
    wins over a ``--set cluster.preset``, as an explicit field does."""
    tokens, label = read_args(text)
    _, launcher = parse_flags(tokens, label)
    return _launcher_count(launcher, label, "nproc-per-node", "nproc_per_node")


def megatron_config(text: str, gpus: int | None = None, gpus_per_node: int | None = None,
                    strict: bool = False) -> MegatronRun:
    """Map a Megatron-LM command line to a raw training config (see the module docstring).
    ``strict``: a flag that is not modelled is an error instead of a note."""
    tokens, label = read_args(text)
    repeats: list[str] = []
    flags, launcher = parse_flags(tokens, label, repeats)
    a = _Args(flags, label)
    _check_refused(a)
    notes: list[str] = [f"--{name} is given more than once: the last one "
                        f"({' '.join(flags[name]) or 'set'}) counts, as in Megatron-LM's "
                        f"argparse" for name in dict.fromkeys(repeats)]
    gpus, gpus_per_node = _world(a, launcher, gpus, gpus_per_node, notes)
    tp = a.int("tensor-model-parallel-size", "model-parallel-size") or 1
    model = _model(a, tp, notes)
    if label != SOURCE:
        model["name"] = Path(label).stem
    checked = _checked_model(model, label)
    _check_tp(a, checked, tp)
    parallel = _parallel(a, checked, tp, gpus, notes)
    training = _training(a, parallel["dp"], notes)
    config: dict[str, Any] = {"model": model, "training": training, "parallel": parallel}
    if gpus_per_node is not None:
        config["cluster"] = {"gpus_per_node": gpus_per_node}
    run = MegatronRun(config, notes, steps=_steps(a, training["global_batch"]))
    _sort_rest(a, run, strict)
    return run


def _training(a: _Args, dp: int, notes: list[str]) -> dict[str, Any]:
    micro = a.int("micro-batch-size", "batch-size")
    if micro is None:
        raise SpecError("missing: the micro-batch size", file=a.label, key="--micro-batch-size")
    global_batch = a.int("global-batch-size")
    if global_batch is None:
        global_batch = micro * dp
        notes.append(f"global batch = micro-batch · dp = {global_batch} (Megatron-LM's default)")
    if a.switch("bf16") and a.switch("fp16"):
        raise SpecError("--bf16 and --fp16 together: Megatron-LM refuses both; keep one",
                        file=a.label, key="--fp16")
    dtype = "bf16" if a.switch("bf16") else "fp16" if a.switch("fp16") else "fp32"
    if dtype == "fp32":
        notes.append("neither --bf16 nor --fp16: fp32 training")
    grads_fp32 = _grads_fp32(a, dtype)
    if grads_fp32 and dtype != "fp32":
        notes.append("gradients accumulated and reduced in fp32 (Megatron-LM's main_grad "
                     "under " + ("bf16" if dtype == "bf16" else
                                 "--accumulate-allreduce-grads-in-fp32") + ")")
    elif dtype == "bf16":
        notes.append("gradients accumulated and reduced in bf16 (--grad-reduce-in-bf16)")
    return {"global_batch": global_batch, "micro_batch": micro, "dtype": dtype,
            "grads_fp32": grads_fp32,
            "grad_accumulation_fusion": not a.switch("no-gradient-accumulation-fusion")}


def _grads_fp32(a: _Args, dtype: str) -> bool:
    """Whether gradients are accumulated and reduced in fp32, as Megatron-LM's validate_args
    decides: forced under bf16 unless --grad-reduce-in-bf16 (which wins over
    --accumulate-allreduce-grads-in-fp32 there); under fp16 only when that flag is given
    (--grad-reduce-in-bf16 does nothing outside bf16)."""
    in_bf16, in_fp32 = a.switch("grad-reduce-in-bf16"), a.switch("accumulate-allreduce-grads-in-fp32")
    return not in_bf16 if dtype == "bf16" else in_fp32


def _parallel(a: _Args, model: ModelConfig, tp: int, gpus: int | None,
              notes: list[str]) -> dict[str, Any]:
    pp = a.int("pipeline-model-parallel-size") or 1
    layers = model.layers
    if layers % pp:
        raise SpecError(f"{layers} layers do not split evenly over {pp} pipeline stages "
                        f"(Megatron-LM requires it)", file=a.label,
                        key="--pipeline-model-parallel-size", value=pp)
    virtual = _virtual_stages(a, layers // pp, pp)
    if gpus is None:
        raise SpecError("the arguments do not say how many GPUs run them: add --gpus N (the "
                        "world size)", file=a.label)
    if gpus % (tp * pp):
        raise SpecError(f"--gpus {gpus} is not a multiple of tp·pp = {tp * pp}", file=a.label)
    dp = gpus // (tp * pp)
    etp = a.int("expert-tensor-parallel-size")
    if etp is not None and etp != tp:
        raise a.refuse("expert-tensor-parallel-size", f"expert tensor parallelism {etp} other "
                                                      f"than the tensor-parallel size {tp} is "
                                                      f"not modelled")
    if a.has("sequence-parallel") and tp == 1:
        notes.append("--sequence-parallel with tp 1: Megatron-LM turns it off")
    torch_ddp = _ddp_impl(a) == "torch"
    overlap = a.switch("overlap-grad-reduce") or torch_ddp
    if not overlap:
        notes.append("no --overlap-grad-reduce: gradients reduced in one bucket after the "
                     "backward")
    bucket = TORCH_DDP_BUCKET_MB if torch_ddp else _bucket_mb(a, model, dp, overlap)
    return {"dp": dp, "tp": tp, "pp": pp, "ep": a.int("expert-model-parallel-size") or 1,
            "virtual_stages": virtual, "schedule": "interleaved" if virtual > 1 else "1f1b",
            "sequence_parallel": a.switch("sequence-parallel") and tp > 1,
            "zero": _zero(a, notes), "recompute": _recompute(a, layers // (pp * virtual), notes),
            "dp_overlap": overlap, "bucket_mb": bucket}


# PyTorch DistributedDataParallel's bucket_cap_mb default: what --DDP-impl torch reduces in
TORCH_DDP_BUCKET_MB = 25.0


def _ddp_impl(a: _Args) -> str:
    """Megatron-LM before Megatron-Core: --DDP-impl local (its own DDP, gradients all-reduced
    after the backward; the default) or torch (PyTorch's DDP, whose buckets overlap it)."""
    impl = a.text("DDP-impl") or "local"
    if impl not in ("local", "torch"):
        raise SpecError("expected local or torch", file=a.label, key="--DDP-impl", value=impl)
    return impl


def _virtual_stages(a: _Args, layers_per_stage: int, pp: int) -> int:
    per_virtual = a.int("num-layers-per-virtual-pipeline-stage")
    virtual = a.int("num-virtual-stages-per-pipeline-rank")
    if per_virtual is not None:
        if layers_per_stage % per_virtual:
            raise SpecError(f"the {layers_per_stage} layers of a stage do not split into virtual "
                            f"stages of {per_virtual}", file=a.label,
                            key="--num-layers-per-virtual-pipeline-stage", value=per_virtual)
        virtual = layers_per_stage // per_virtual
    elif virtual is not None and virtual > 1 and layers_per_stage % virtual:
        raise SpecError(f"the {layers_per_stage} layers of a stage do not split into {virtual} "
                        f"virtual stages", file=a.label,
                        key="--num-virtual-stages-per-pipeline-rank", value=virtual)
    virtual = virtual or 1
    if virtual > 1 and pp < 2:
        raise SpecError("virtual pipeline stages need --pipeline-model-parallel-size > 1",
                        file=a.label, key="--num-layers-per-virtual-pipeline-stage")
    return virtual


def _bucket_mb(a: _Args, model: ModelConfig, dp: int, overlap: bool) -> float:
    """Megatron-Core's DDP buckets: --ddp-bucket-size parameters, else max(40 M, 1 M·dp) when
    overlapping; one bucket holding every gradient when not (16-bit gradients, in MiB)."""
    size = a.int("ddp-bucket-size")
    if overlap:
        return 2.0 * (size or max(40_000_000, 1_000_000 * dp)) / 2**20
    from opatlas.estimate import model as pm

    return float(math.ceil(2.0 * pm.total_params(model) / 2**20))


# the flag each model key comes from, for the errors the config's own validation finds
MODEL_FLAGS = {"layers": "--num-layers", "hidden": "--hidden-size",
               "heads": "--num-attention-heads", "kv_heads": "--num-query-groups",
               "head_dim": "--kv-channels", "ffn": "--ffn-hidden-size",
               "vocab": "--vocab-size", "seq_len": "--seq-length", "experts": "--num-experts",
               "top_k": "--moe-router-topk"}


def _checked_model(model: dict[str, Any], label: str) -> ModelConfig:
    """``model`` validated, an error naming the Megatron flag of the bad value (the rules
    across flags are checked before, in Megatron-LM's terms)."""
    try:
        return ModelConfig.model_validate(model)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        flag = MODEL_FLAGS.get(key, f"model.{key}" if key else None)
        raise SpecError(msg, file=label, key=flag,
                        value=model.get(key) if key in MODEL_FLAGS else None) from None


def _check_tp(a: _Args, model: ModelConfig, tp: int) -> None:
    """Megatron-LM splits the attention heads, the query groups and the FFN's width over the
    tensor-parallel ranks, and asserts that each divides."""
    key = "model-parallel-size" if a.has("model-parallel-size") and \
        not a.has("tensor-model-parallel-size") else "tensor-model-parallel-size"  # 2021 name
    given = ["moe-ffn-hidden-size", "ffn-hidden-size"] if model.experts else ["ffn-hidden-size"]
    ffn = next((f"--{n}" for n in given if a.has(n)), "the default FFN width")
    parts = [("--num-attention-heads", model.heads, "attention heads"),
             ("--num-query-groups", model.kv, "query groups"),
             (ffn, model.ffn_width, "FFN's width")]
    for flag, count, what in parts:
        if count % tp:
            raise SpecError(f"{flag} {count} is not a multiple of it (Megatron-LM splits the "
                            f"{what} over the tensor-parallel ranks)", file=a.label,
                            key=f"--{key}", value=tp)


def _steps(a: _Args, global_batch: int) -> int | None:
    iters = a.int("train-iters")
    samples = a.int("train-samples")
    if iters is not None and samples is not None:  # Megatron-LM asserts one or the other
        raise SpecError("give --train-iters or --train-samples, not both (Megatron-LM refuses "
                        "both)", file=a.label, key="--train-samples", value=samples)
    if iters is not None:
        return iters
    return math.ceil(samples / global_batch) if samples is not None else None
