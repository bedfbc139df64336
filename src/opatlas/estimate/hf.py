"""A Hugging Face ``config.json`` as the model part of a training config.

The standard fields map onto :class:`~opatlas.estimate.config.ModelConfig`; the architecture
(``model_type``) decides what the file does not say: gated or ungated FFN, RMSNorm or
LayerNorm, RoPE or learned positions, biases, and the default of ``tie_word_embeddings``
(as ``transformers`` defines it for that architecture). Every mapping reports which fields it
read, which defaults it assumed and which fields it left unused, so a caller can say so.

Refused rather than estimated wrongly: unknown architectures, multi-head latent attention
(DeepSeek-V2/V3), sliding-window attention shorter than the sequence, and MoE models that mix
dense and expert layers. A ``head_dim`` (Qwen3, Gemma) is taken as the heads' width, which
need not be hidden/heads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from opatlas.errors import SpecError

MLA_FIELDS = ("kv_lora_rank", "q_lora_rank")


@dataclass(frozen=True)
class Family:
    """What an architecture fixes that its config.json does not spell out."""

    gated: bool
    norm: str
    rope: bool
    bias: bool
    tied_default: bool
    moe: str | None = None            # field holding the expert count, None for dense
    expert_ffn: str = "intermediate_size"
    aliases: dict[str, str] = field(default_factory=dict)  # our standard name -> its name
    default_act: str = "silu"
    gqa: bool = True                  # reads num_key_value_heads
    qk_norm: Literal[False, "head", "full"] = False  # "full": OLMo 2's, over all heads
    qkv_bias: bool = False            # biases on q, k, v alone (Qwen2)
    # the dropouts' fields and transformers' defaults: (attention, its default, hidden, its
    # default); a hidden field of None: the architecture has no dropout on the hidden state
    dropouts: tuple[str, float, str | None, float] = ("attention_dropout", 0.0, None, 0.0)


_GPT2_NAMES = {"hidden_size": "n_embd", "num_hidden_layers": "n_layer",
               "num_attention_heads": "n_head", "intermediate_size": "n_inner",
               "max_position_embeddings": "n_positions", "hidden_act": "activation_function"}

FAMILIES: dict[str, Family] = {
    "llama": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=False),
    "mistral": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=False),
    "mixtral": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=False,
                      moe="num_local_experts"),
    "qwen2": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=False,
                    qkv_bias=True),
    "qwen3": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=False,
                    qk_norm="head"),
    "qwen3_moe": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=False,
                        moe="num_experts", expert_ffn="moe_intermediate_size", qk_norm="head"),
    "olmo2": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=False,
                    qk_norm="full"),
    "gpt2": Family(gated=False, norm="layernorm", rope=False, bias=True, tied_default=True,
                   aliases=_GPT2_NAMES, default_act="gelu_new", gqa=False,
                   dropouts=("attn_pdrop", 0.1, "resid_pdrop", 0.1)),
    "gpt_neox": Family(gated=False, norm="layernorm", rope=True, bias=True, tied_default=False,
                       default_act="gelu", gqa=False,
                       dropouts=("attention_dropout", 0.0, "hidden_dropout", 0.0)),
    "phi3": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=False,
                   dropouts=("attention_dropout", 0.0, "resid_pdrop", 0.0)),
    "gemma": Family(gated=True, norm="rmsnorm", rope=True, bias=False, tied_default=True,
                    default_act="gelu_pytorch_tanh"),
}


# the opatlas key that states, in place of each field a config.json may leave out, what
# the field decides (a --set KEY=VALUE, or a model: key beside model.hf)
STATED_BY = {"num_key_value_heads": "model.kv_heads", "intermediate_size": "model.ffn",
             "hidden_act": "model.ffn_kind", "tie_word_embeddings": "model.tied_embeddings",
             "attention_bias": "model.bias", "mlp_bias": "model.mlp_bias"}


@dataclass(frozen=True)
class Assumption:
    """A value taken because the config.json leaves ``key`` out (its own name, or the opatlas
    key for what no field gives, such as the run's model.seq_len); ``stated_by``: the opatlas
    key that gives it explicitly instead, and ``stated`` the value that key takes for it
    where that differs (hidden_act silu: model.ffn_kind swiglu)."""

    key: str
    value: Any
    why: str
    stated_by: str
    stated: Any = None
    said: str = ""  # the note that says it

    @property
    def given(self) -> Any:
        """The value ``stated_by`` takes to state this assumption explicitly."""
        return self.value if self.stated is None else self.stated


@dataclass
class HFModel:
    """``fields``: ModelConfig keys; ``read``/``assumed``/``unused``: for the user;
    ``defaults``: the values of ``assumed`` taken for fields the file leaves out (the rest of
    ``assumed`` says how a field given is approximated)."""

    fields: dict[str, Any]
    read: list[str]
    assumed: list[str]
    unused: list[str]
    # a learned position table's rows (the field naming them, its value); None with RoPE
    positions: tuple[str, int] | None = None
    defaults: list[Assumption] = field(default_factory=list)

    def notes(self, source: str, explicit: frozenset[str] = frozenset()) -> list[str]:
        """What was read, assumed and left unused; an assumption one of the ``explicit``
        opatlas keys (``model.kv_heads``) states instead is not said to be assumed."""
        out = [f"{source}: read {', '.join(self.read)}"]
        stated = {a.said for a in self.defaults if a.stated_by in explicit}
        if assumed := [text for text in self.assumed if text not in stated]:
            out.append(f"{source}: assumed {'; '.join(assumed)}")
        if self.unused:
            out.append(f"{source}: not used: {', '.join(self.unused)}")
        return out


def is_hf_config(data: dict[str, Any]) -> bool:
    """A Hugging Face model config rather than an opatlas or estimate-train-time one."""
    return "model" not in data and "training_config" not in data and \
        ("model_type" in data or "architectures" in data)


def read_hf_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise SpecError(f"cannot read the Hugging Face config: {exc.strerror}",
                        file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"not valid JSON: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise SpecError("a Hugging Face config.json must be a JSON object", file=str(path))
    return data


def bundled_hf(name: str) -> Path | None:
    """A bundled config.json by name (``llama-3.1-8b``), or None."""
    from importlib import resources

    stem = name.removesuffix(".json")
    found = resources.files("opatlas") / "data" / "hf" / f"{stem}.json"
    return Path(str(found)) if found.is_file() else None


def hf_model_name(path: Path) -> str:
    """``.../Llama-3.1-8B/config.json`` -> ``Llama-3.1-8B``; ``x.json`` -> ``x``."""
    return path.parent.name if path.stem == "config" and path.parent.name else path.stem


class _Reader:
    """Reads fields from one config.json, remembering what was read and assumed."""

    def __init__(self, data: dict[str, Any], family: Family, file: str) -> None:
        self.data, self.family, self.file = data, family, file
        self.read: list[str] = []
        self.assumed: list[str] = []
        self.defaults: list[Assumption] = []

    def assume(self, text: str, assumption: Assumption) -> None:
        """Say ``text`` and record the value taken for a field the file leaves out."""
        self.assumed.append(text)
        self.defaults.append(replace(assumption, said=text))

    def _default(self, name: str, key: str, value: Any, shown: str, why: str,
                 stated_by: str | None = None, stated: Any = None) -> None:
        self.assume(f"{name} = {shown}{f' ({why})' if why else ''}",
                    Assumption(name, value, why, stated_by or STATED_BY[key], stated))

    def _name(self, key: str) -> str:
        return self.family.aliases.get(key, key)

    def has(self, key: str) -> bool:
        return self.data.get(self._name(key)) is not None

    def int(self, key: str, default: int | None = None, why: str = "") -> int:
        name = self._name(key)
        value = self.data.get(name)
        if value is None:
            if default is None:
                raise SpecError(f"the field is missing; it is needed for {why or 'the model shape'}",
                                file=self.file, key=name)
            self._default(name, key, default, str(default), why)
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError("must be a positive integer", file=self.file, key=name, value=value)
        self.read.append(name)
        return value

    def flag(self, key: str, default: bool, why: str) -> bool:
        name = self._name(key)
        value = self.data.get(name)
        if value is None:
            self._default(name, key, default, str(default).lower(), why)
            return default
        if not isinstance(value, bool):
            raise SpecError("must be true or false", file=self.file, key=name, value=value)
        self.read.append(name)
        return value

    def fraction(self, key: str, default: float, stated_by: str) -> float:
        """A probability in [0, 1), such as a dropout."""
        value = self.data.get(key)
        if value is None:
            if default:
                self._default(key, key, default, f"{default:g}", "the architecture's default",
                              stated_by)
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                not 0 <= value < 1:
            raise SpecError("must be a probability in [0, 1)", file=self.file, key=key,
                            value=value)
        self.read.append(key)
        return float(value)

    def text(self, key: str, default: str, stated: Any = None) -> str:
        """``stated``: the value of the opatlas key (STATED_BY) that states the default."""
        name = self._name(key)
        value = self.data.get(name)
        if value is None:
            self._default(name, key, default, default, "the architecture's default",
                          stated=stated)
            return default
        self.read.append(name)
        return str(value)


def _family(data: dict[str, Any], file: str) -> tuple[str, Family]:
    present = [k for k in MLA_FIELDS if data.get(k) is not None]
    if present:
        raise SpecError(f"multi-head latent attention ({', '.join(present)}: DeepSeek-V2/V3 "
                        f"style) is not modelled; opatlas refuses it rather than estimate it "
                        f"as multi-head attention", file=file, key=present[0],
                        value=data[present[0]])
    model_type = data.get("model_type")
    if model_type is None:
        raise SpecError(f"the field is missing, so the architecture is unknown (supported: "
                        f"{', '.join(sorted(FAMILIES))})", file=file, key="model_type")
    if model_type not in FAMILIES:
        raise SpecError(f"model_type {model_type!r} names an unsupported architecture"
                        f"{_architectures_aside(data)}; supported model types: "
                        f"{', '.join(sorted(FAMILIES))}", file=file, key="model_type",
                        value=model_type)
    return model_type, FAMILIES[model_type]


def _architectures_aside(data: dict[str, Any]) -> str:
    """Why ``architectures`` is not the field refused: the family is read from
    ``model_type`` alone, so a supported-looking ``architectures`` does not rescue it."""
    arch = data.get("architectures")
    if not arch:
        return ""
    shown = ", ".join(map(str, arch)) if isinstance(arch, list) else str(arch)
    return f" (the family is read from model_type, not from architectures: {shown})"


def _attention(r: _Reader) -> dict[str, int]:
    """``head_dim`` where the config gives one (Qwen3, Gemma: heads · head_dim may differ from
    hidden_size)."""
    if r.data.get("head_dim") is None:
        return {}
    return {"head_dim": r.int("head_dim")}


def _window(r: _Reader) -> int | None:
    """The sliding-window length in force, if any (a window in force counts as read); a
    window that is no positive integer is refused, not taken for none or for a length."""
    if r.data.get("sliding_window") is None or r.data.get("use_sliding_window") is False:
        return None
    return r.int("sliding_window")


def _sliding_window(r: _Reader, seq_len: int) -> None:
    window = _window(r)
    if window is not None and window < seq_len:
        raise SpecError(f"sliding-window attention over {window} tokens, shorter than the "
                        f"sequence of {seq_len}, is not modelled (set model.seq_len <= {window}"
                        f" to estimate full attention)", file=r.file, key="sliding_window",
                        value=window)


def _dropouts(r: _Reader, fam: Family) -> dict[str, float]:
    """The dropouts a training run of this config applies (those that are not 0)."""
    attention, attention_default, hidden, hidden_default = fam.dropouts
    found = {"attention_dropout": r.fraction(attention, attention_default,
                                             "model.attention_dropout"),
             "hidden_dropout": r.fraction(hidden, hidden_default, "model.hidden_dropout")
             if hidden else 0.0}
    return {k: v for k, v in found.items() if v > 0}


def _experts(r: _Reader, fam: Family) -> dict[str, Any]:
    if fam.moe is None:
        return {}
    experts = r.int(fam.moe, why="the number of experts")
    top_k = r.int("num_experts_per_tok", why="experts per token")
    if r.data.get("mlp_only_layers") or r.data.get("decoder_sparse_step", 1) != 1:
        raise SpecError("a model that mixes dense and expert layers is not modelled",
                        file=r.file, key="mlp_only_layers" if r.data.get("mlp_only_layers")
                        else "decoder_sparse_step")
    for key in ("mlp_only_layers", "decoder_sparse_step"):
        if key in r.data:
            r.read.append(key)
    return {"experts": experts, "top_k": top_k}


def map_hf_config(data: dict[str, Any], file: str, seq_len: int | None = None) -> HFModel:
    """The ModelConfig fields of a Hugging Face config; ``seq_len`` is the run's sequence
    length when the caller knows it (else ``max_position_embeddings``)."""
    model_type, fam = _family(data, file)
    r = _Reader(data, fam, file)
    r.read.append("model_type")
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    layers = r.int("num_hidden_layers")
    kv = r.int("num_key_value_heads", heads, "multi-head attention: one KV head per head") \
        if fam.gqa else heads
    if heads % kv:
        raise SpecError(f"num_attention_heads {heads} is not a multiple of it (each key/value "
                        f"head serves a whole group of query heads)", file=file,
                        key=r._name("num_key_value_heads"), value=kv)
    head_dim = _attention(r)
    if fam.moe is not None and fam.expert_ffn != "intermediate_size":
        ffn = r.int(fam.expert_ffn, why="the experts' FFN width")
    elif fam.gated:
        ffn = r.int("intermediate_size", why="the FFN width")
    else:
        ffn = r.int("intermediate_size", 4 * hidden, "4 · hidden_size")
    vocab = r.int("vocab_size", why="the embedding and output layer")
    positions = None
    if seq_len is None:
        seq_len = r.int("max_position_embeddings",
                        why="the sequence length; set model.seq_len to the run's")
        positions = seq_len
        window = _window(r)
        if window is not None and window < seq_len:  # the longest full-attention sequence
            r.assume(f"model.seq_len = sliding_window = {window}, the longest sequence "
                     f"full attention models (max_position_embeddings is {seq_len}; "
                     f"set model.seq_len to the run's sequence length)",
                     _run_seq_len(window, "sliding_window, the longest full attention models"))
            seq_len = window
        else:
            r.assume(f"model.seq_len = max_position_embeddings = {seq_len} (set "
                     f"model.seq_len to the run's sequence length)",
                     _run_seq_len(seq_len, "max_position_embeddings"))
    elif not fam.rope:
        positions = r.int("max_position_embeddings", why="the learned position table")
    _sliding_window(r, seq_len)
    act = r.text("hidden_act", fam.default_act, "swiglu" if fam.gated else "gelu")
    if fam.gated and act not in ("silu", "swish"):
        r.assumed.append(f"the gated FFN with {act} is timed as SwiGLU")
    tied = r.flag("tie_word_embeddings", fam.tied_default, f"{model_type}'s default")
    bias, mlp_bias = fam.bias, None
    if model_type == "llama":
        bias = r.flag("attention_bias", False, "llama's default")
        mlp_bias = r.flag("mlp_bias", False, "llama's default")
    if model_type == "olmo2":
        bias, mlp_bias = r.flag("attention_bias", False, "olmo2's default"), False
        r.assumed.append("OLMo 2's norms after the attention and the FFN are timed as the "
                         "usual two norms a layer")
    fields = {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv, "ffn": ffn,
              "ffn_kind": "swiglu" if fam.gated else "gelu", "vocab": vocab,
              "seq_len": seq_len, "norm": fam.norm, "rope": fam.rope,
              "learned_positions": not fam.rope, "bias": bias, "tied_embeddings": tied,
              **({"qk_norm": fam.qk_norm} if fam.qk_norm else {}),
              **({"qkv_bias": True} if fam.qkv_bias else {}),
              **({"mlp_bias": mlp_bias} if mlp_bias is not None and mlp_bias != bias else {}),
              **head_dim, **_experts(r, fam), **_dropouts(r, fam)}
    read = list(dict.fromkeys(r.read))
    table = (r._name("max_position_embeddings"), positions) \
        if positions is not None and not fam.rope else None
    return HFModel(fields, read, r.assumed, sorted(k for k in data if k not in read), table,
                   r.defaults)


def _run_seq_len(value: int, source: str) -> Assumption:
    """The run's sequence length, which no config.json field gives, taken from ``source``."""
    return Assumption("model.seq_len", value, f"the run's sequence length taken as {source}",
                      "model.seq_len")


def unstated(mapped: HFModel, explicit: set[str]) -> list[Assumption]:
    """The defaults of ``mapped`` that none of the ``explicit`` opatlas keys (``model.kv_heads``,
    ...) gives instead: those still assumed."""
    return [a for a in mapped.defaults if a.stated_by not in explicit]


def check_positions(mapped: HFModel, seq_len: int, learned: object, file: str) -> None:
    """Refuse a sequence longer than the learned position table, as Megatron-LM and
    transformers stop on it; ``learned``: model.learned_positions as resolved (an explicit
    one wins). RoPE has no table, so no such limit."""
    if mapped.positions is None or not learned:
        return
    name, rows = mapped.positions
    if seq_len > rows:
        raise SpecError(f"shorter than model.seq_len {seq_len} (the learned position table "
                        f"has no row past it: transformers and Megatron-LM stop on it)",
                        file=file, key=name, value=rows)
