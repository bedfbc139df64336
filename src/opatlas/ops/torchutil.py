"""Small helpers shared by the PyTorch-backed ops (torch imported lazily)."""

from __future__ import annotations

from typing import Any

_TORCH_DTYPES = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def torch_dtype(name: str) -> Any:
    import torch

    try:
        return getattr(torch, _TORCH_DTYPES[name])
    except KeyError:
        raise ValueError(f"dtype {name!r} cannot run on PyTorch; use one of "
                         f"{sorted(_TORCH_DTYPES)}") from None


def randn(*shape: int, dtype: str, device: str, grad: bool = True) -> Any:
    import torch

    return torch.randn(*shape, dtype=torch_dtype(dtype), device=device, requires_grad=grad)
