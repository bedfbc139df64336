"""Estimate inputs beyond opatlas's YAML: Hugging Face configs, Megatron-LM arguments, --set
what-ifs, cluster presets, and whole runs (steps, days, GPU-hours, cost)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from conftest import REPO, cli_in_process, one_error, refused, run_cli
from opatlas.devices import get_device
from opatlas.errors import OpatlasError, SpecError
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate import model as pm
from opatlas.estimate.config import ModelConfig
from opatlas.estimate.hf import map_hf_config
from opatlas.estimate.inputs import load_inputs
from opatlas.estimate.megatron import megatron_config
from opatlas.estimate.overrides import apply_overrides
from opatlas.estimate.run import parse_count, rank_by_run, whole_run

MEGATRON = REPO / "examples" / "megatron"


# --- Hugging Face config.json -------------------------------------------------------------

@pytest.mark.parametrize(("name", "published"), [
    ("llama-3.1-8b", 8.03e9), ("llama-3.1-70b", 70.6e9), ("mixtral-8x7b-v0.1", 46.7e9),
    ("qwen2.5-7b", 7.61e9), ("qwen3-8b", 8.19e9)])
def test_bundled_hf_configs_match_the_published_parameter_counts(name, published):
    assert pm.total_params(load_config(name).model) == pytest.approx(published, rel=0.002)


def test_qwen2_counts_its_query_key_value_biases_exactly():
    m = load_config("qwen2.5-7b").model
    assert m.qkv_bias and not m.bias
    # 28 layers, each with biases on q (3,584) and on k and v (4 heads of 128 each)
    no_bias = m.model_copy(update={"qkv_bias": None})
    assert pm.total_params(m) - pm.total_params(no_bias) == 28 * (3584 + 2 * 512)
    assert pm.total_params(m) == 7_615_616_512  # Qwen2.5-7B's published count, to the unit


def test_megatron_add_qkv_bias():
    args = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --vocab-size 50257 --disable-bias-linear --add-qkv-bias")
    m = ModelConfig(**megatron_config(args, gpus=8).config["model"])
    assert (m.bias, m.qkv_bias) == (False, True)
    assert pm.attention_params(m) == 4 * 1024**2 + 3 * 1024


def test_llama_fields_and_what_was_read_and_assumed():
    notes: list[str] = []
    m = load_config("llama-3.1-8b", notes).model
    assert (m.layers, m.hidden, m.heads, m.kv, m.ffn, m.vocab) == (32, 4096, 32, 8, 14336, 128256)
    assert (m.ffn_kind, m.norm, m.rope, m.tied_embeddings, m.bias) == \
        ("swiglu", "rmsnorm", True, False, False)
    assert m.seq_len == 131072  # max_position_embeddings, said so
    text = "\n".join(notes)
    assert "read model_type, hidden_size" in text and "num_key_value_heads" in text
    assert "model.seq_len = max_position_embeddings = 131072" in text
    # 4 Mi tokens / 131072 = 32 sequences per step, stated as assumed
    assert load_config("llama-3.1-8b").training.global_batch == 32
    assert "assumed training.global_batch = 32" in text


def test_gpt2_family_defaults_give_gpt2_small_exactly():
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 768,
           "n_layer": 12, "n_head": 12, "n_positions": 1024, "n_inner": None,
           "vocab_size": 50257, "activation_function": "gelu_new"}
    mapped = map_hf_config(cfg, "gpt2.json")
    f = mapped.fields
    assert (f["ffn"], f["tied_embeddings"], f["bias"], f["learned_positions"], f["norm"]) == \
        (3072, True, True, True, "layernorm")
    assert any("n_inner = 3072" in a for a in mapped.assumed)
    from opatlas.estimate.config import ModelConfig

    assert pm.total_params(ModelConfig(**f)) == 124_439_808  # GPT-2 small, as HF counts it


def test_hf_dropouts_are_read_with_transformers_defaults():
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
            "n_positions": 1024, "vocab_size": 50257}
    mapped = map_hf_config(gpt2, "gpt2.json")  # GPT2Config's defaults: 0.1 and 0.1
    f = mapped.fields
    assert (f["attention_dropout"], f["hidden_dropout"]) == (0.1, 0.1)
    assert any("resid_pdrop = 0.1" in a for a in mapped.assumed)
    f = map_hf_config({**gpt2, "resid_pdrop": 0.0, "attn_pdrop": 0.25}, "gpt2.json").fields
    assert f["attention_dropout"] == 0.25 and "hidden_dropout" not in f
    neox = {"model_type": "gpt_neox", "hidden_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 8, "vocab_size": 50304, "max_position_embeddings": 2048,
            "hidden_dropout": 0.1, "attention_dropout": 0.0}
    mapped = map_hf_config(neox, "neox.json")
    assert mapped.fields["hidden_dropout"] == 0.1 and "attention_dropout" not in mapped.fields
    assert {"hidden_dropout", "attention_dropout"} <= set(mapped.read)
    # Llama's attention_dropout of 0 is read, not left unused; it has no hidden dropout
    llama = json.loads((REPO / "src/opatlas/data/hf/llama-3.1-8b.json").read_text())
    mapped = map_hf_config(llama, "llama.json")
    assert "attention_dropout" in mapped.read and "hidden_dropout" not in mapped.fields
    with pytest.raises(SpecError, match="resid_pdrop") as exc:
        map_hf_config({**gpt2, "resid_pdrop": 1.5}, "gpt2.json")
    assert "probability" in str(exc.value)


# what the bundled llama2 configs leave to the defaults, stated: --strict refuses defaults
STATED = ("--set", "model.attention=flash", "--set", "parallel.dp_overlap=true",
          "--set", "parallel.bucket_mb=25", "--set", "cluster.intra_latency_us=5",
          "--set", "cluster.inter_latency_us=10")


def test_attention_dropout_inside_flash_attention_is_said_and_refused_under_strict(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b",
                                  "--set", "model.attention_dropout=0.1")
    assert code == 0 and "attention_dropout 0.1 inside flash attention is not timed" in err
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--strict",
                                  "--set", "model.attention_dropout=0.1", *STATED)
    one_error(code, err, "flash attention", "refused")


def test_pythia_and_gemma_families_give_their_published_counts():
    from opatlas.estimate.config import ModelConfig

    pythia = {"model_type": "gpt_neox", "hidden_size": 768, "num_hidden_layers": 12,
              "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50304,
              "max_position_embeddings": 2048, "rotary_pct": 0.25, "tie_word_embeddings": False}
    f = map_hf_config(pythia, "pythia-160m.json").fields
    assert (f["ffn_kind"], f["norm"], f["bias"], f["rope"]) == ("gelu", "layernorm", True, True)
    assert pm.total_params(ModelConfig(**f)) == 162_322_944  # EleutherAI's Pythia-160M
    gemma = {"model_type": "gemma", "hidden_size": 2048, "num_hidden_layers": 18,
             "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
             "intermediate_size": 16384, "vocab_size": 256000, "max_position_embeddings": 8192,
             "hidden_act": "gelu"}
    mapped = map_hf_config(gemma, "gemma-2b.json")
    assert mapped.fields["tied_embeddings"] and mapped.fields["kv_heads"] == 1
    assert any("timed as SwiGLU" in a for a in mapped.assumed)
    assert pm.total_params(ModelConfig(**mapped.fields)) == pytest.approx(2.51e9, rel=0.002)


def test_model_hf_in_a_yaml_with_explicit_fields_winning(tmp_path):
    hf = tmp_path / "ckpt" / "config.json"
    hf.parent.mkdir()
    hf.write_text((REPO / "src/opatlas/data/hf/llama-3.1-8b.json").read_text())
    y = tmp_path / "run.yml"
    y.write_text("model: {hf: ckpt, seq_len: 8192, layers: 16}\n"
                 "training: {global_batch: 256}\nparallel: {dp: 8, tp: 8}\n")
    cfg = load_config(y)
    assert (cfg.model.name, cfg.model.seq_len, cfg.model.layers, cfg.model.hidden) == \
        ("ckpt", 8192, 16, 4096)
    assert cfg.training.global_batch == 256


@pytest.mark.parametrize(("extra", "key", "message"), [
    ({"model_type": "deepseek_v3", "kv_lora_rank": 512, "q_lora_rank": 1536}, "kv_lora_rank",
     "multi-head latent attention"),
    ({"model_type": "bert"}, "model_type", "unsupported architecture"),
    ({"model_type": "llama", "hidden_size": None}, "hidden_size", "missing"),
    ({"num_key_value_heads": 5}, "num_key_value_heads", "num_attention_heads 32 is not a "
                                                        "multiple of it"),
])
def test_unsupported_hf_configs_are_refused_naming_the_field(tmp_path, extra, key, message):
    base = json.loads((REPO / "src/opatlas/data/hf/llama-3.1-8b.json").read_text())
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**base, **extra}))
    with pytest.raises(SpecError, match=message) as info:
        load_config(p)
    assert info.value.key == key and info.value.file == str(p)


def test_a_sliding_window_caps_the_default_sequence_and_refuses_a_longer_one(tmp_path):
    base = json.loads((REPO / "src/opatlas/data/hf/llama-3.1-8b.json").read_text())
    hf = tmp_path / "mistral" / "config.json"
    hf.parent.mkdir()
    hf.write_text(json.dumps({**base, "model_type": "mistral", "sliding_window": 4096,
                              "max_position_embeddings": 32768}))
    notes: list[str] = []
    assert load_config(hf, notes).model.seq_len == 4096  # not max_position_embeddings
    assert any("model.seq_len = sliding_window = 4096" in n for n in notes)
    y = tmp_path / "run.yml"
    y.write_text("model: {hf: mistral, seq_len: 8192}\ntraining: {global_batch: 64}\n")
    with pytest.raises(SpecError, match="sliding-window attention over 4096") as info:
        load_config(y)
    assert info.value.key == "sliding_window"


# --- Megatron-LM arguments ----------------------------------------------------------------

def test_gpt3_example_args_map_every_flag():
    run = megatron_config(f"@{MEGATRON / 'gpt3-175b.args'}", gpus=1024)
    m, t, p = run.config["model"], run.config["training"], run.config["parallel"]
    assert (m["layers"], m["hidden"], m["heads"], m["ffn"], m["attention"]) == \
        (96, 12288, 96, 4 * 12288, "flash")
    assert m["vocab"] == 51200  # GPT-2 BPE's 50,257 padded to a multiple of 128·tp = 1024
    assert (m["learned_positions"], m["bias"], m["tied_embeddings"]) == (True, True, True)
    assert (t["global_batch"], t["micro_batch"], t["dtype"]) == (1536, 1, "bf16")
    assert (p["dp"], p["tp"], p["pp"], p["virtual_stages"], p["schedule"]) == \
        (16, 8, 8, 3, "interleaved")
    assert (p["sequence_parallel"], p["recompute"], p["zero"], p["dp_overlap"]) == \
        (True, "selective", 1, True)
    assert p["bucket_mb"] == pytest.approx(2 * 40e6 / 2**20)  # max(40 M, 1 M·16) parameters
    assert run.steps == math.ceil(146_484_375 / 1536)  # --train-samples over the batch
    assert {"lr", "save", "data-path"} <= set(run.no_effect)
    assert run.not_modelled == ["overlap-param-gather"]
    with pytest.raises(SpecError, match="strict") as info:
        megatron_config(f"@{MEGATRON / 'gpt3-175b.args'}", gpus=1024, strict=True)
    assert info.value.key == "--overlap-param-gather"


def test_megatron_defaults_when_flags_are_absent():
    run = megatron_config("--num-layers 4 --hidden-size 4096 --num-attention-heads 32 "
                          "--seq-length 1024 --micro-batch-size 2 --vocab-size 32000 --swiglu",
                          gpus=8)
    m, t, p = run.config["model"], run.config["training"], run.config["parallel"]
    assert m["ffn"] == 10880  # int(4·4096·2/3 / 64)·64
    assert m["attention"] == "unfused" and m["vocab"] == 32000  # already a multiple of 128
    assert (t["dtype"], t["global_batch"]) == ("fp32", 16)  # micro-batch · dp
    assert (p["zero"], p["dp_overlap"], p["recompute"], p["schedule"]) == (0, False, "none", "1f1b")
    # one bucket: every gradient of the model fits in it
    model = load_inputs(megatron_args="--num-layers 4 --hidden-size 4096 "
                        "--num-attention-heads 32 --seq-length 1024 --micro-batch-size 2 "
                        "--vocab-size 32000 --swiglu", gpus=8).config.model
    assert p["bucket_mb"] >= 2 * pm.total_params(model) / 2**20
    assert any("unfused" in n for n in run.notes)
    assert (m["attention_dropout"], m["hidden_dropout"]) == (0.1, 0.1)
    assert {"--attention-dropout 0.1 (Megatron-LM's default)",
            "--hidden-dropout 0.1 (Megatron-LM's default)"} <= set(run.notes)
    mqa = megatron_config("--num-layers 4 --hidden-size 4096 --num-attention-heads 32 "
                          "--seq-length 1024 --micro-batch-size 2 --vocab-size 32000 "
                          "--group-query-attention", gpus=8)
    assert mqa.config["model"]["kv_heads"] == 1  # Megatron's --num-query-groups default


def test_megatron_dropouts_are_read_and_a_bad_one_is_named():
    base = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --vocab-size 50257 ")
    run = megatron_config(base + "--attention-dropout 0 --hidden-dropout 0.25", gpus=8)
    m = run.config["model"]
    assert (m["attention_dropout"], m["hidden_dropout"]) == (0.0, 0.25)
    assert not [n for n in run.notes if "dropout" in n]
    for value in ("1.0", "-0.1", "some"):
        with pytest.raises(SpecError, match=r"expected a probability in \[0, 1\)") as info:
            megatron_config(base + f"--hidden-dropout={value}", gpus=8)
        assert (info.value.key, info.value.value) == ("--hidden-dropout", value)


def test_old_and_new_recompute_spellings_agree_and_torchrun_gives_the_gpus():
    base = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --global-batch-size 64 --vocab-size 50257 --fp16 ")
    old = megatron_config(base + "--checkpoint-activations", gpus=16)
    new = megatron_config(base + "--recompute-granularity full --recompute-method uniform "
                                 "--recompute-num-layers 1", gpus=16)
    assert old.config == new.config and old.config["parallel"]["recompute"] == "full"
    launched = megatron_config("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py "
                               + base + "--checkpoint-activations")
    assert launched.config["parallel"]["dp"] == 16
    assert launched.config["cluster"] == {"gpus_per_node": 8}
    script = ("python -m torch.distributed.run --nproc_per_node 4 pretrain_gpt.py \\\n"
              "    " + base.replace(" --", " \\\n    --") + "\\\n    --checkpoint-activations"
              "  # a comment\n")
    assert megatron_config(script).config == {**old.config, "cluster": {"gpus_per_node": 4},
                                              "parallel": {**old.config["parallel"], "dp": 4}}


@pytest.mark.parametrize(("flags", "key", "message"), [
    ("--tensor-model-paralel-size 8", "--tensor-model-paralel-size", "not a Megatron-LM flag"),
    ("--context-parallel-size 2", "--context-parallel-size", "context parallelism"),
    ("--fp8-format hybrid", "--fp8-format", "FP8"),
    ("--multi-latent-attention", "--multi-latent-attention", "latent attention"),
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 1",
     "--recompute-num-layers", "recomputing 1 of the 8"),
    ("--bf16 extra", "--bf16", "takes no value"),
])
def test_megatron_flags_that_matter_but_cannot_be_modelled_are_errors(flags, key, message):
    base = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --vocab-size 50257 ")
    with pytest.raises(SpecError, match=message) as info:
        megatron_config(base + flags, gpus=8)
    if key:
        assert info.value.key == key
    megatron_config(base + "--context-parallel-size 1", gpus=8)  # the neutral value is fine
    with pytest.raises(SpecError, match="--gpus"):
        megatron_config(base)


def _selene_yaml(tmp_path: Path, layers: int, hidden: int, heads: int, tp: int, pp: int,
                 gpus: int, batch: int, micro: int, virtual: int, torch_ddp: bool) -> Path:
    """A Selene run written by hand as opatlas YAML (the same assumptions as the .args):
    ``torch_ddp``, PyTorch's DDP overlapping the all-reduce in 25 MB buckets, else Megatron-LM's
    own all-reducing every gradient after the backward."""
    cfg = {"model": {"name": "selene", "layers": layers, "hidden": hidden, "heads": heads,
                     "seq_len": 2048, "vocab": 51200, "ffn_kind": "gelu", "norm": "layernorm",
                     "learned_positions": True, "bias": True, "tied_embeddings": True,
                     "attention": "unfused", "attention_dropout": 0.1, "hidden_dropout": 0.1},
           "training": {"global_batch": batch, "micro_batch": micro, "dtype": "fp16",
                        "grad_accumulation_fusion": False},
           "parallel": {"dp": gpus // (tp * pp), "tp": tp, "pp": pp, "zero": 0,
                        "recompute": "full", "sequence_parallel": False,
                        "dp_overlap": torch_ddp, "bucket_mb": 25.0 if torch_ddp else 1.0e6,
                        "virtual_stages": virtual,
                        "schedule": "interleaved" if virtual > 1 else "1f1b"},
           "cluster": {"preset": "dgx-a100"}}
    path = tmp_path / "selene.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize(("name", "shape"), [
    ("18b", (40, 6144, 48, 8, 1, 256, 1024, 8, 1, True)),
    ("145b", (80, 12288, 96, 8, 8, 1536, 2304, 2, 2, False)),
    ("1.7b", (24, 2304, 24, 1, 1, 32, 512, 16, 1, True))])
def test_selene_runs_as_yaml_and_as_megatron_args_give_identical_estimates(tmp_path, name, shape):
    from_yaml = estimate_step(load_config(_selene_yaml(tmp_path, *shape))).as_json()
    args = load_inputs(megatron_args=f"@{MEGATRON / f'selene-gpt-{name}.args'}", gpus=shape[5],
                       sets=["cluster.preset=dgx-a100"]).config
    from_args = estimate_step(args).as_json()
    assert from_args.pop("model") == f"selene-gpt-{name}"
    from_yaml.pop("model")
    assert from_args == from_yaml
    assert from_args["step_time_s"] > 0 and from_args["gpus"] == shape[5]


def test_mixtral_as_megatron_args_equals_the_bundled_yaml():
    """MoE, GQA, SwiGLU, RoPE, RMSNorm, untied, no biases, flash, ZeRO-1, overlap, buckets."""
    args = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
            "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --num-experts 8 "
            "--moe-router-topk 2 --seq-length 4096 --max-position-embeddings 32768 "
            "--vocab-size 32000 --make-vocab-size-divisible-by 64 --normalization RMSNorm "
            "--position-embedding-type rope --untie-embeddings-and-output-weights "
            "--disable-bias-linear --use-flash-attn --bf16 --tensor-model-parallel-size 4 "
            "--pipeline-model-parallel-size 4 --sequence-parallel --recompute-granularity "
            "selective --micro-batch-size 1 --global-batch-size 1024 --use-distributed-optimizer "
            "--overlap-grad-reduce --ddp-bucket-size 13107200 --moe-token-dispatcher-type "
            "alltoall --moe-grouped-gemm --moe-aux-loss-coeff 1e-2 --attention-dropout 0.0 "
            "--hidden-dropout 0")
    from_args = load_inputs(megatron_args=args, gpus=128, sets=["cluster.preset=dgx-h100"])
    # Megatron-LM under bf16 keeps its gradients in fp32 (main_grad): said, and the only
    # difference from the bundled YAML
    assert from_args.config.training.grads_fp32
    assert any("gradients accumulated and reduced in fp32" in n for n in from_args.notes)
    plain = load_config("mixtral-8x7b")
    from_yaml = load_inputs("mixtral-8x7b", sets=["training.grads_fp32=true"]).config
    assert from_args.config.model.model_dump(exclude={"name"}) == \
        from_yaml.model.model_dump(exclude={"name"})
    assert from_args.config.parallel == from_yaml.parallel
    a, y = estimate_step(from_args.config).as_json(), estimate_step(from_yaml).as_json()
    a.pop("model"), y.pop("model")
    assert a == y
    half = estimate_step(plain).as_json()["memory_breakdown_gib"]["gradients"]
    assert a["memory_breakdown_gib"]["gradients"] == pytest.approx(2 * half)  # 4 bytes, not 2
    # without the padding multiple, Megatron pads 32,000 to a multiple of 128·tp = 512
    padded = megatron_config(args.replace("--make-vocab-size-divisible-by 64 ", ""), gpus=128)
    assert padded.config["model"]["vocab"] == 32256


# --- --set, presets, devices --------------------------------------------------------------

def test_set_overrides_are_validated_like_the_file():
    base = load_inputs("llama2-7b").config
    cfg = load_inputs("llama2-7b", sets=["parallel.tp=4", "training.micro_batch=2",
                                         "cluster.preset=dgx-b200"]).config
    assert (cfg.parallel.tp, cfg.training.micro_batch, cfg.cluster.device) == (4, 2, "B200-SXM-180GB")
    assert cfg.parallel.dp == base.parallel.dp and cfg.cluster.intra_bw_gbps == 900.0
    with pytest.raises(SpecError, match="no such key: parallel has bucket_mb, dp") as info:
        load_inputs("llama2-7b", sets=["parallel.tpp=4"])
    assert info.value.key == "parallel.tpp"
    with pytest.raises(SpecError, match="is a section"):
        apply_overrides({}, ["parallel=4"])
    with pytest.raises(SpecError) as info:
        load_inputs("llama2-7b", sets=["parallel.tp=four"])
    assert (info.value.file, info.value.key) == ("--set", "parallel.tp")
    with pytest.raises(SpecError, match=r"tp 3 must divide heads 32") as info:
        load_inputs("llama2-7b", sets=["parallel.tp=3"])
    assert (info.value.file, info.value.key) == ("--set", "parallel.tp")
    assert "'model'" not in str(info.value)  # one line, not the whole config echoed


def test_presets_take_datasheet_figures_and_explicit_fields_win(tmp_path):
    y = tmp_path / "c.yml"
    y.write_text("model: {layers: 2, hidden: 256, heads: 4, seq_len: 128}\n"
                 "training: {global_batch: 8}\n"
                 "cluster: {preset: dgx-a100, inter_bw_gbps: 12.5}\n")
    c = load_config(y).cluster
    assert (c.device, c.gpus_per_node, c.intra_bw_gbps, c.inter_bw_gbps) == \
        ("A100-SXM4-80GB", 8, 300.0, 12.5)
    nvl = load_inputs(str(y), sets=["cluster.preset=gb200-nvl72", "cluster.inter_bw_gbps=50"])
    assert nvl.config.cluster.gpus_per_node == 72
    assert get_device(nvl.config.cluster.device).peak("bf16") == 2.5e15
    assert get_device("B200").memory_bytes == 180 * 2**30  # nominal GB taken as GiB
    example = load_config(REPO / "examples" / "estimate" / "llama-3.1-8b-dgx-h100.yml")
    assert (example.cluster.device, example.model.seq_len, example.model.ffn, example.gpus) == \
        ("H100-SXM5-80GB", 8192, 14336, 64)
    y.write_text(y.read_text().replace("dgx-a100", "dgx-z9"))
    with pytest.raises(SpecError, match="unknown cluster preset"):
        load_config(y)


def test_gpus_fill_dp_or_must_agree():
    cfg = load_inputs("llama-3.1-8b", gpus=64, sets=["model.seq_len=8192", "parallel.tp=2"])
    assert (cfg.config.parallel.dp, cfg.config.parallel.tp) == (32, 2)
    with pytest.raises(OpatlasError, match="disagrees"):
        load_inputs("llama2-7b", gpus=3)
    # a what-if on tp keeps the Megatron run's 1024 GPUs: dp follows
    what_if = load_inputs(megatron_args=f"@{MEGATRON / 'gpt3-175b.args'}", gpus=1024,
                          sets=["parallel.tp=4"]).config.parallel
    assert (what_if.dp, what_if.tp, what_if.pp) == (32, 4, 8)


# --- whole runs ---------------------------------------------------------------------------

def test_whole_run_arithmetic():
    assert (parse_count("2T"), parse_count("300B"), parse_count("1.5e12")) == (2e12, 3e11, 1.5e12)
    with pytest.raises(OpatlasError, match="--tokens"):
        parse_count("lots")
    est = estimate_step(load_config("llama2-7b"))
    tokens_per_step = est.config.training.global_batch * est.config.model.seq_len
    run = whole_run(est, tokens=2e12, gpu_hour_price=2.0)
    assert run.steps == math.ceil(2e12 / tokens_per_step)
    assert run.days == pytest.approx(run.steps * est.step_time_s / 86400)
    assert run.gpu_hours == pytest.approx(run.days * 24 * est.config.gpus)
    assert run.cost == pytest.approx(2.0 * run.gpu_hours)
    assert whole_run(est, steps=1000).days == pytest.approx(1000 * est.step_time_s / 86400)


def test_runs_rank_by_time_to_train_not_step_time():
    small = estimate_step(load_config("llama2-7b"))
    cfg = load_config("llama2-7b")
    big_batch = cfg.model_copy(update={"training": cfg.training.model_copy(
        update={"global_batch": 4 * cfg.training.global_batch})})
    big = estimate_step(big_batch)
    assert big.step_time_s > small.step_time_s
    ranked = rank_by_run([small, big], tokens=1e12)
    expected = sorted([small, big], key=lambda e: 1e12 / e.tokens_per_s)
    assert [e for e, _ in ranked] == expected


def test_cli_whole_run_from_megatron_args_end_to_end():
    out = run_cli("estimate", "--megatron-args", f"@{MEGATRON / 'selene-gpt-18b.args'}",
                  "--gpus", "256", "--set", "cluster.preset=dgx-a100", "--tokens", "100B",
                  "--gpu-hour-price", "1.5", "--json", check=True)
    data = json.loads(out.stdout)
    run = data["run"]
    assert run["steps"] == math.ceil(100e9 / (1024 * 2048))
    assert run["days"] == pytest.approx(run["steps"] * data["step_time_s"] / 86400)
    assert run["cost"] == pytest.approx(1.5 * run["gpu_hours"])
    assert "--lr" in out.stderr and "no effect" in out.stderr
    assert "not modelled" not in out.stderr  # --DDP-impl torch is: PyTorch's DDP overlaps
    assert "no --overlap-grad-reduce" not in out.stderr


@pytest.mark.parametrize(("flag", "overlap", "bucket_mb"), [
    ("", False, None), ("--DDP-impl local", False, None), ("--DDP-impl torch", True, 25.0),
    ("--overlap-grad-reduce", True, 2.0 * 40_000_000 / 2**20)])
def test_legacy_ddp_impl_torch_overlaps_the_gradient_all_reduce(flag, overlap, bucket_mb):
    """Megatron-LM of 2021: --DDP-impl local (the default) all-reduces after the backward, in
    one bucket of every gradient; torch is PyTorch's DDP, 25 MB buckets overlapping it."""
    base = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--max-position-embeddings 2048 --micro-batch-size 1 --fp16 --vocab-size 32000 ")
    p = load_inputs(megatron_args=base + flag, gpus=8).config.parallel
    assert p.dp_overlap is overlap
    if bucket_mb is not None:
        assert p.bucket_mb == pytest.approx(bucket_mb)
    else:  # one bucket holding every 16-bit gradient
        assert p.bucket_mb > 2 * 4 * 12 * 1024**2 / 2**20


def test_an_unknown_ddp_impl_is_one_clear_error():
    from opatlas.errors import SpecError

    with pytest.raises(SpecError, match=r"--DDP-impl.*fsdp|fsdp.*--DDP-impl"):
        load_inputs(megatron_args="--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                                  "--seq-length 2048 --vocab-size 32000 --DDP-impl fsdp", gpus=8)


def test_cli_search_ranks_by_time_to_train(capsys):
    code, out, err = cli_in_process(capsys, "estimate", "qwen2.5-7b", "--gpus", "8", "--search", "--set",
                          "model.seq_len=4096", "--tokens", "1T", "--top", "3", "--json")
    s = json.loads(out)
    days = [e["run"]["days"] for e in s["top"]]
    assert code == 0 and len(days) == 3 and days == sorted(days)
    assert s["ranked_by"] == "time to train" and "qwen2.5-7b: read" in err


def test_cli_bad_inputs_get_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "deepseek_v3", "kv_lora_rank": 512}))
    for args in (["estimate", str(bad)], ["estimate", "llama2-7b", "--set", "parallel.tpp=2"],
                 ["estimate", "--megatron-args", "--num-layers 2 --foo 1", "--gpus", "8"],
                 ["estimate", "llama2-7b", "--gpu-hour-price", "2"]):
        code, _, err = cli_in_process(capsys, *args)
        assert code == 2 and "Traceback" not in err
        # one error; the defaults a bundled config leaves to opatlas are said before it
        errors = [ln for ln in err.strip().splitlines() if not ln.startswith("note: assumed")]
        assert len(errors) == 1, err


def test_estimate_says_what_it_would_otherwise_do_silently(tmp_path, capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--top", "3")
    assert code == 0 and "--top ranks the layouts of --search; ignored without it" in err
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--tokens", "1K")
    assert "--tokens 1K rounded up to 1 whole step(s) of 4.19M tokens" in err
    hf = tmp_path / "config.json"
    hf.write_text((REPO / "src/opatlas/data/hf/llama-3.1-8b.json").read_text())
    code, out, err = cli_in_process(capsys, "estimate", str(hf), "--json")
    said = json.loads(out)["assumptions"]
    assert said and all(f"note: {n}" in err for n in said)  # --json carries what stderr says


def test_a_layout_that_does_not_fit_is_refused_under_strict(capsys):
    args = ("estimate", "llama2-70b", "--set", "parallel.tp=1", "--set", "parallel.pp=1",
            "--set", "parallel.dp=64", "--set", "parallel.schedule=1f1b",
            "--set", "parallel.virtual_stages=1")  # interleaving needs a pipeline
    code, out, err = cli_in_process(capsys, *args, "--json")
    assert code == 0 and json.loads(out)["fits"] is False and "out of memory" in err
    code, _, err = cli_in_process(capsys, *args, "--strict", *STATED)
    one_error = [ln for ln in err.splitlines() if ln.startswith("opatlas: error")]
    assert code == 2 and len(one_error) == 1 and "out of memory" in one_error[0]


def test_megatron_repeats_and_default_query_groups_are_said():
    run = megatron_config("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                          "--group-query-attention --tensor-model-parallel-size 8 "
                          "--tensor-model-parallel-size 1 --vocab-size 32000 --seq-length 2048 "
                          "--max-position-embeddings 2048 --micro-batch-size 1 "
                          "--global-batch-size 8", gpus=8)
    text = " ".join(run.notes)
    # (one query group cannot be split over tp > 1: Megatron-LM refuses it, and so does this)
    assert "--tensor-model-parallel-size is given more than once: the last one (1)" in text
    assert run.config["parallel"]["tp"] == 1
    assert "one key/value group" in text and run.config["model"]["kv_heads"] == 1


def test_unknown_yaml_keys_name_what_the_section_takes(tmp_path):
    err = refused(load_config, tmp_path / "bad.yml",
                  "model: {name: m, layers: 8, hidden: 1024, heads: 16, seq_len: 2048, "
                  "tie_embeddings: true}\ntraining: {global_batch: 64}\n",
                  "did you mean 'tied_embeddings'")
    assert err.key == "model.tie_embeddings" and "model takes name, layers" in str(err)


def test_a_set_inside_a_section_rule_is_named():
    with pytest.raises(SpecError, match=r"with --set model\.hidden=4095"):
        load_inputs("llama2-7b", sets=["model.hidden=4095"])


def test_megatron_heads_that_do_not_divide_the_hidden_size_name_kv_channels():
    args = ("--num-layers 4 --hidden-size 2048 --num-attention-heads 15 --seq-length 1024 "
            "--micro-batch-size 1 --vocab-size 50257 ")
    for extra in ("", "--overlap-grad-reduce"):
        with pytest.raises(SpecError, match="not divisible by it \\(give --kv-channels") as info:
            megatron_config(args + extra, gpus=8)
        assert (info.value.key, info.value.value) == ("--num-attention-heads", 15)
    assert megatron_config(args + "--kv-channels 128", gpus=8).config["model"]["head_dim"] == 128


def test_megatron_train_iters_and_train_samples_together_are_refused():
    base = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
            "--micro-batch-size 1 --vocab-size 50257 ")
    assert megatron_config(base + "--train-samples 5000 --global-batch-size 8",
                           gpus=8).steps == 625
    with pytest.raises(SpecError, match="not both") as info:
        megatron_config(base + "--train-iters 1000 --train-samples 5000", gpus=8)
    assert info.value.key == "--train-samples"
