"""The built-in LLM catalog sweep: every op of the catalog at the shapes of real 1B–70B models,
forward and backward, bf16 and fp16. One spec per op, named ``llm-<op>`` (``opatlas sweep
list``); a GPU dataset such as the H100 one of issue 5 is made by running all of them (see
``scripts/gpu_session.sh``).

Model shapes are *tied* (one entry per model, so no unreal dim × heads × FFN crossings); the
tensor-parallel degree ``mp`` and the micro-batch tokens ``b × l`` are crossed with them.
"""

from __future__ import annotations

from typing import Any

from opatlas.spec import SweepSpec
from opatlas.sweep.builtin import register_builtin_spec

# name: shape, from each model's published config.json (hidden_size, num_attention_heads,
# num_key_value_heads, intermediate_size, vocab_size)
MODELS: dict[str, dict[str, int]] = {
    "llama-3.2-1b": {"dim": 2048, "h": 32, "kv_heads": 8, "ffn": 8192, "vocab": 128256},
    "llama-3.2-3b": {"dim": 3072, "h": 24, "kv_heads": 8, "ffn": 8192, "vocab": 128256},
    "llama-2-7b": {"dim": 4096, "h": 32, "kv_heads": 32, "ffn": 11008, "vocab": 32000},
    "llama-3-8b": {"dim": 4096, "h": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256},
    "llama-2-13b": {"dim": 5120, "h": 40, "kv_heads": 40, "ffn": 13824, "vocab": 32000},
    "llama-2-70b": {"dim": 8192, "h": 64, "kv_heads": 8, "ffn": 28672, "vocab": 32000},
}
MIXTRAL_8X7B = {"dim": 4096, "ffn": 14336, "experts": 8, "top_k": 2, "gated": 1}
MP = [1, 2, 4, 8]
BATCH = [1, 2, 4]
SEQ = [2048, 4096]
DTYPES = ["bf16", "fp16"]
LINEAR_ROLES = ["qkv", "out", "ffn_up", "ffn_down", "vocab"]

# op: (the model keys it takes, extra axes, whether it has a tensor-parallel degree)
OPS: dict[str, tuple[tuple[str, ...], dict[str, list[Any]], bool]] = {
    "linear": (("dim", "h", "kv_heads", "ffn", "vocab"), {"role": LINEAR_ROLES}, True),
    "flash_attention": (("dim", "h", "kv_heads"), {"l": [1024, 2048, 4096, 8192]}, True),
    "bmm": (("dim", "h"), {}, True),
    "baddbmm": (("dim", "h"), {}, True),
    "softmax": (("h",), {}, True),
    "masked_softmax": (("h",), {}, True),
    "fillmask": (("h",), {}, True),
    "rope": (("dim", "h"), {}, True),
    "swiglu": (("dim", "ffn"), {}, True),
    "gelu": (("dim", "ffn"), {}, True),
    "embedding": (("dim", "vocab"), {}, True),
    "cross_entropy": (("vocab",), {}, True),
    "rmsnorm": (("dim",), {}, False),
    "layernorm": (("dim",), {}, False),
    "residual_add": (("dim",), {}, False),
    "attention_dropout": (("h",), {}, True),
    "bias_dropout_add": (("dim",), {"p": [0.0, 0.1]}, False),
}
# gradient-buffer sizes of a pipeline stage on one rank: 100 M to 2 B parameters
ACCUMULATE_PARAMS = [100_000_000, 250_000_000, 500_000_000, 1_000_000_000, 2_000_000_000]


def model_entries(keys: tuple[str, ...]) -> list[dict[str, int]]:
    """The distinct model shapes restricted to ``keys``, in model order (7B and 8B share
    dim 4096, so an op that takes only ``dim`` gets it once)."""
    out: list[dict[str, int]] = []
    for shape in MODELS.values():
        entry = {k: shape[k] for k in keys}
        if entry not in out:
            out.append(entry)
    return out


def op_spec(op: str) -> SweepSpec:
    keys, extra, has_mp = OPS[op]
    params: dict[str, Any] = {"dtype": DTYPES, "model": model_entries(keys)}
    if has_mp:
        params["mp"] = MP
    params |= {"b": BATCH, "l": SEQ} | extra
    return SweepSpec(name=f"llm-{op}", op=op, source="builtin", params=params,
                     repeats=10, warmup=3)


def adam_spec() -> SweepSpec:
    """The optimizer step of one pipeline stage: fp32 states, 1–8 layers, first/middle/last."""
    return SweepSpec(name="llm-adam_step", op="adam_step", source="builtin", repeats=10,
                     warmup=3, params={"dtype": ["fp32"],
                                       "model": model_entries(("dim", "ffn", "vocab")),
                                       "mp": MP, "encoders": [1, 4, 8],
                                       "stage": ["first", "middle", "last"]})


def moe_spec() -> SweepSpec:
    """Mixtral-8x7B's expert layer: top-2 of 8 SwiGLU experts."""
    return SweepSpec(name="llm-moe", op="moe", source="builtin", repeats=10, warmup=3,
                     params={"dtype": DTYPES, "model": [MIXTRAL_8X7B], "mp": MP,
                             "b": BATCH, "l": SEQ})


def accumulate_spec() -> SweepSpec:
    """Unfused gradient accumulation (Megatron-LM before 2022): 16-bit gradients added into a
    16- or 32-bit buffer, over a stage's parameters."""
    return SweepSpec(name="llm-grad_accumulate", op="grad_accumulate", source="builtin",
                     repeats=10, warmup=3,
                     params={"dtype": DTYPES, "n_params": ACCUMULATE_PARAMS,
                             "buffer_bytes": [2, 4]})


def llm_spec_names() -> list[str]:
    return [f"llm-{op}" for op in (*OPS, "adam_step", "moe", "grad_accumulate")]


for _op in OPS:
    register_builtin_spec(f"llm-{_op}", lambda op=_op: op_spec(op))
register_builtin_spec("llm-adam_step", adam_spec)
register_builtin_spec("llm-moe", moe_spec)
register_builtin_spec("llm-grad_accumulate", accumulate_spec)
