"""What one optimizer step streams besides the Adam kernel: the mixed-precision passes.

Megatron-LM's mixed-precision optimizer (``Float16OptimizerWithFloat16Params``; the
distributed optimizer does the same over its shard) runs these around the fused Adam kernel
over the fp32 main parameters, bytes per parameter:

- ``grads_to_fp32`` (``_copy_model_grads_to_main_grads``): 16-bit gradients cast into fp32
  main gradients, read 2 and write 4. There is no such pass when the gradients are already
  kept in fp32, because the main gradient is then the buffer itself.
- ``unscale`` (fp16 only): the loss scale is divided out and non-finite values are checked
  (``_amp_foreach_non_finite_check_and_unscale_``), read 4 and write 4. bf16 has no loss
  scale.
- ``grad_norm``: the gradient norm for clipping (``multi_tensor_l2norm``), read 4. Scaling
  by the clip factor runs only when the norm exceeds the threshold, so it is not counted.
- ``params_to_16bit`` (``_copy_main_params_to_model_params``): the updated fp32 main
  parameters cast back to the model's 16 bits, read 4 and write 2.
- ``zero_grads``: the gradient buffer is zeroed before the next step's first micro-batch,
  writing its width.

fp32 training keeps no main copy, so only the norm and the zeroing remain.

The measured optimizer samples time the fused Adam kernel alone over fp32 states
(``ADAM_BYTES_PER_PARAM``, catalog op ``adam_step``). These passes are multi-tensor
memory-bound kernels of the same kind, so they are taken to stream at the rate that kernel
attains: the step's time is the Adam time × (Adam's bytes + theirs) / Adam's bytes.
"""

from __future__ import annotations

from opatlas.estimate.config import TrainingConfig
from opatlas.ops.transformer import ADAM_BYTES_PER_PARAM


def mixed_precision_passes(t: TrainingConfig) -> dict[str, int]:
    """Bytes per parameter of each pass of one optimizer step besides the Adam kernel."""
    passes = {"grad_norm": 4, "zero_grads": t.grad_bytes}
    if t.dtype != "fp32":
        passes["params_to_16bit"] = 4 + 2
        if t.grad_bytes == 2:
            passes["grads_to_fp32"] = 2 + 4
        if t.dtype == "fp16":
            passes["unscale"] = 4 + 4
    return passes


def passes_bytes(t: TrainingConfig, buffer_over_shard: float = 1.0) -> float:
    """The passes' bytes per parameter the optimizer updates. Under ZeRO-1 (the distributed
    optimizer) a rank updates 1/dp of the parameters but zeroes its whole gradient buffer,
    ``buffer_over_shard`` times as many."""
    passes = mixed_precision_passes(t)
    return sum(passes.values()) + passes["zero_grads"] * (buffer_over_shard - 1.0)


def step_over_adam(t: TrainingConfig, buffer_over_shard: float = 1.0) -> float:
    """The optimizer step's time over the Adam kernel's: (28 + passes' bytes) / 28."""
    return (ADAM_BYTES_PER_PARAM + passes_bytes(t, buffer_over_shard)) / ADAM_BYTES_PER_PARAM
