"""Megatron-LM flags that :mod:`opatlas.estimate.megatron` does not map, sorted by what they
do to a training estimate. Names are written without the leading ``--``; both the current
Megatron-Core names and the 2021-era ones appear (the Selene runs used the latter).

- ``NO_EFFECT``: data, logging, checkpointing, learning-rate schedule, initialisation,
  regularisation, tokenizer files, fault tolerance — they do not change the step.
- ``NOT_MODELLED``: how the same model is run, which the estimator does not distinguish
  (communication overlaps, kernel fusions and implementations, precision of the gradient
  reduction, CUDA graphs, memory housekeeping) or small elementwise variants of an op it
  times (``rotary-percent``, ``qk-l2-norm``); the estimate is what the run costs without
  them, the flags are said in a note, and ``--strict`` refuses them.
- ``REFUSED``: flags that change what is computed or stored (the layers, their widths, the
  number format, the pipeline split, the optimizer's state) in a way the estimator cannot
  represent; the mapping stops with an error rather than estimate another model. So do
  ``NEUTRAL`` flags with another than their neutral value, ``REFUSED_UNLESS`` flags with
  another than the values listed, and a flag in none of these lists.
Prefixes cover whole families of flags (``inference-*``, ``wandb-*`` ...).
"""

from __future__ import annotations


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


NO_EFFECT = _names("""
log-params-norm log-num-zeros-in-grad log-throughput log-progress timing-log-level log-energy
no-barrier-with-level-1-timing timing-log-option log-interval log-validation-ppl-to-tensorboard
log-memory-to-tensorboard log-world-size-to-tensorboard log-timers-to-tensorboard
no-log-loss-scale-to-tensorboard log-batch-size-to-tensorboard log-learning-rate-to-tensorboard
log-loss-scale-to-tensorboard logging-level log-straggler disable-straggler-on-startup
no-one-logger app-tag-run-name app-tag-run-version config-logger-dir
run-workload-inspector-server enable-ft-package calc-ft-timeouts profile profile-step-start
profile-step-end profile-ranks use-pytorch-profiler record-memory-history memory-snapshot-path
weight-decay start-weight-decay end-weight-decay
weight-decay-incr-style clip-grad adam-beta1 adam-beta2 adam-eps sgd-momentum loss-scale
initial-loss-scale min-loss-scale loss-scale-window hysteresis
lr min-lr warmup override-opt_param-scheduler override-opt-param-scheduler
use-checkpoint-opt_param-scheduler use-checkpoint-opt-param-scheduler decoupled-lr
decoupled-min-lr seed data-parallel-random-init init-method-std embedding-init-method-std
init-method-xavier-uniform
save save-interval persistent-save-interval save-retain-interval no-save-optim no-save-rng
load no-load-optim load-main-params-from-ckpt no-load-rng no-strict-fsdp-dtensor-load
non-persistent-save-interval non-persistent-ckpt-type non-persistent-global-ckpt-dir
non-persistent-local-ckpt-dir non-persistent-local-ckpt-algo finetune pretrained-checkpoint
no-initialization use-checkpoint-args use-mp-args-from-checkpoint-args
no-use-tokenizer-model-from-checkpoint-args exit-on-missing-checkpoint use-dist-ckpt
use-persistent-ckpt-worker auto-detect-ckpt-format async-save distrib-optim-fully-reshardable-mem-efficient
data-path split train-data-path valid-data-path test-data-path data-args-path
per-split-data-args-path data-cache-path no-mmap-bin-files mock-data num-workers
reset-position-ids reset-attention-mask eod-mask-loss no-create-attention-mask-in-dataloader
num-dataset-builder-threads object-storage-cache-path mid-level-dataset-surplus
allow-ambiguous-pad-tokens dataloader-type data-impl mmap-warmup sample-rate mask-prob
short-seq-prob retriever-seq-length
eval-iters eval-interval full-validation multiple-validation-sets test-mode skip-train
tokenizer-model tokenizer-metadata tiktoken-pattern tiktoken-num-special-tokens
tiktoken-special-tokens legacy-tokenizer trust-remote-code vocab-extra-ids
exit-interval exit-duration-in-mins exit-signal-handler adlr-autoresume
adlr-autoresume-interval
distributed-backend distributed-timeout-minutes distributed-timeout-seconds-after-init
local-rank lazy-mpu-init use-cpu-initialization check-weight-hash-across-dp-replicas-interval
calculate-per-token-loss train-sync-interval no-check-for-nan-in-loss-and-grad
check-for-spiky-loss check-for-large-grads iterations-to-skip result-rejected-tracker-filename
disable-gloo-process-groups error-injection-rate error-injection-type rerun-mode disable-msc
nccl-communicator-config-path replication replication-jump replication-factor
use-mcore-models transformer-impl te-rng-tracker inference-rng-tracker enable-experimental
rotary-base rotary-interleaved rotary-seq-len-interpolation-factor use-rope-scaling
rope-scaling-factor rope-type no-rope-freq norm-epsilon apply-layernorm-1p
apply-residual-connection-post-layernorm openai-gelu onnx-safe softmax-type
moe-router-load-balancing-type moe-router-dtype moe-router-score-function
moe-router-pre-softmax moe-router-num-groups moe-router-group-topk
moe-router-topk-scaling-factor moe-router-enable-expert-bias moe-router-bias-update-rate
moe-aux-loss-coeff moe-z-loss-coeff moe-input-jitter-eps moe-per-layer-logging
moe-token-drop-policy moe-use-upcycling moe-upcycling-granularity
apply-query-key-layer-scaling attention-softmax-in-fp32 fp16-lm-cross-entropy
disable-bf16-reduced-precision-matmul
""")

NO_EFFECT_PREFIXES = ("inference-", "inprocess-", "one-logger-", "wandb-", "tensorboard-",
                      "lr-", "ckpt-", "dist-ckpt-", "straggler-")

NOT_MODELLED = _names("""
overlap-param-gather overlap-param-gather-with-optimizer-step no-align-grad-reduce
no-align-param-gather ddp-num-buckets ddp-pad-buckets-for-high-nccl-busbw
ddp-reduce-scatter-with-fp32-accumulation ddp-average-in-collective use-nccl-ub
disable-symmetric-registration use-sharp sharp-enabled-group no-gradient-reduce-div-fusion
no-contiguous-buffers-in-local-ddp
fp32-residual-connection
tp-comm-overlap tp-comm-overlap-cfg disable-tp-comm-overlap-ag disable-tp-comm-overlap-rs
tp-comm-overlap-rs-dgrad disable-tp-comm-bulk-dgrad disable-tp-comm-bulk-wgrad
tp-comm-bootstrap-backend disable-tp-comm-split-ag disable-tp-comm-split-rs
no-overlap-p2p-communication overlap-p2p-communication-warmup-flush
microbatch-group-size-per-virtual-pipeline-stage pipeline-model-parallel-comm-backend
no-scatter-gather-tensors-in-pipeline scatter-gather-tensors-in-pipeline
use-ring-exchange-p2p high-priority-stream-groups defer-embedding-wgrad-compute
wgrad-deferral-limit use-tp-pp-dp-mapping
no-masked-softmax-fusion no-bias-gelu-fusion no-bias-swiglu-fusion no-bias-dropout-fusion
no-rope-fusion cross-entropy-loss-fusion cross-entropy-fusion-impl no-persist-layer-norm
no-async-tensor-model-parallel-allreduce
use-fused-weighted-squared-relu use-te-activation-func deterministic-mode manual-gc
manual-gc-interval no-manual-gc-eval empty-unused-memory-level
enable-cuda-graph cuda-graph-warmup-steps external-cuda-graph cuda-graph-impl cuda-graph-scope
moe-token-dispatcher-type moe-enable-deepep moe-deepep-num-sms moe-permute-fusion
moe-grouped-gemm moe-use-legacy-grouped-gemm moe-router-fusion moe-router-force-load-balancing
moe-router-padding-for-fp8 moe-expert-capacity-factor moe-apply-probs-on-input
overlap-moe-expert-parallel-comm delay-wgrad-compute qk-l2-norm
rotary-percent rampup-batch-size distribute-saved-activations
distribute-checkpointed-activations spec
""")

REFUSED: dict[str, str] = {
    "multi-latent-attention": "multi-head latent attention (DeepSeek-V2/V3) is not modelled",
    "q-lora-rank": "multi-head latent attention (DeepSeek-V2/V3) is not modelled",
    "kv-lora-rank": "multi-head latent attention (DeepSeek-V2/V3) is not modelled",
    "fp8-format": "FP8 training is not modelled (the estimator's dtypes: fp16, bf16, fp32)",
    "fp4-format": "FP4 training is not modelled (the estimator's dtypes: fp16, bf16, fp32)",
    "fp8-param-gather": "FP8 training is not modelled",
    "window-size": "sliding-window attention is not modelled",
    "window-attn-skip-freq": "sliding-window attention is not modelled",
    "decoder-first-pipeline-num-layers": "uneven pipeline stages are not modelled",
    "decoder-last-pipeline-num-layers": "uneven pipeline stages are not modelled",
    "pipeline-model-parallel-layout": "custom pipeline layouts are not modelled",
    "account-for-embedding-in-pipeline-split": "pipeline splits that count the embedding as a "
                                               "layer are not modelled",
    "account-for-loss-in-pipeline-split": "pipeline splits that count the loss as a layer are "
                                          "not modelled",
    "moe-shared-expert-intermediate-size": "shared experts are not modelled",
    "moe-pad-expert-input-to-capacity": "capacity-padded experts are not modelled (the "
                                        "estimator assumes dropless, balanced routing)",
    "moe-layer-recompute": "recomputing only the MoE layers is not modelled",
    "moe-extended-tp": "expert tensor parallelism other than the tensor-parallel size is not "
                       "modelled",
    "heterogeneous-layers-config-path": "heterogeneous layers are not modelled",
    "heterogeneous-layers-config-encoded-json": "heterogeneous layers are not modelled",
    "is-hybrid-model": "hybrid (Mamba) models are not modelled",
    "hybrid-override-pattern": "hybrid (Mamba) models are not modelled",
    "hybrid-attention-ratio": "hybrid (Mamba) models are not modelled",
    "hybrid-mlp-ratio": "hybrid (Mamba) models are not modelled",
    "decoder-num-layers": "encoder-decoder models are not modelled",
    "decoder-seq-length": "encoder-decoder models are not modelled",
    "retro-add-retriever": "Retro's retrieval encoder is not modelled",
    "optimizer-cpu-offload": "optimizer offloading to the CPU is not modelled",
    "use-precision-aware-optimizer": "reduced-precision optimizer states are not modelled "
                                     "(the estimator counts 12 bytes of Adam state a parameter)",
    "yaml-cfg": "a Megatron YAML config holds further arguments opatlas cannot see; pass them "
                "as flags",
    "perform-rl-step": "RL training steps (generation plus training) are not modelled",
}

# Flags whose value may be the neutral one (then they change nothing): flag -> neutral values.
NEUTRAL: dict[str, tuple[str, ...]] = {
    "context-parallel-size": ("1",),
    "num-distributed-optimizer-instances": ("1",),
    "moe-layer-freq": ("1",),
    "cpu-offloading-num-layers": ("0",),
    "mtp-num-layers": ("0",),
    "optimizer": ("adam",),
}
NEUTRAL_WHY = {
    "context-parallel-size": "context parallelism is not modelled",
    "num-distributed-optimizer-instances": "partial distributed-optimizer sharding is not "
                                           "modelled",
    "moe-layer-freq": "models mixing dense and MoE layers are not modelled",
    "cpu-offloading-num-layers": "offloading activations to the CPU is not modelled",
    "mtp-num-layers": "multi-token prediction layers are not modelled",
    "optimizer": "only Adam is modelled",
}

# Flags refused unless their value is one listed (then they are NOT_MODELLED, and said):
# flag -> (values taken, why another is refused).
REFUSED_UNLESS: dict[str, tuple[tuple[str, ...], str]] = {
    "spec": (("local",), "a custom layer spec builds a model opatlas cannot see (only --spec "
                         "local, the same layers without Transformer Engine, is taken)"),
}
