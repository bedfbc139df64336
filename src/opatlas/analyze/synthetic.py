"""A synthetic torch.profiler trace of any size, in the layout torch writes (CPU operator
events with shapes, runtime launches, GPU kernels linked by correlation id, device
properties): for benchmarks and for checking the GPU attribution path on a machine without
one. Every number in it is derived from its arguments, so tests can check totals by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

# one transformer layer's forward: (op, input dims, kernel µs about 1.3x its H100 roofline);
# linears hold an addmm
_LAYER = [("aten::layer_norm", [[8, 2048, 4096], [4096], [4096]], 110.0),
          ("aten::linear", [[8, 2048, 4096], [12288, 4096], [12288]], 2200.0),
          ("aten::scaled_dot_product_attention",
           [[8, 32, 2048, 128], [8, 32, 2048, 128], [8, 32, 2048, 128]], 750.0),
          ("aten::linear", [[8, 2048, 4096], [4096, 4096], [4096]], 750.0),
          ("aten::add", [[8, 2048, 4096], [8, 2048, 4096]], 160.0),
          ("aten::gelu", [[8, 2048, 16384]], 420.0),
          ("aten::view", [[8, 2048, 4096], []], 0.0)]


def synthetic_trace(path: str | Path, events: int = 100_000, gpu: bool = True) -> dict[str, Any]:
    """Write a trace of about ``events`` "X" events; returns its true totals (kernel µs per
    op name, the summed kernel time, event count)."""
    out: list[dict[str, Any]] = []
    corr, t = 0, 0.0
    kernel_us: dict[str, float] = {}
    per_layer = sum(2 + (2 if gpu and k > 0 else 0) + (name == "aten::linear") * 1
                    for name, _, k in _LAYER)
    for _ in range(max(1, events // per_layer)):
        for name, dims, k_us in _LAYER:
            start = t
            out.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": start,
                        "dur": 20.0, "args": {"Input Dims": dims,
                                              "Input type": ["c10::BFloat16"] * len(dims)}})
            inner = start + 1.0
            if name == "aten::linear":
                out.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1,
                            "ts": inner, "dur": 15.0,
                            "args": {"Input Dims": [dims[2], [dims[0][0] * dims[0][1], dims[0][2]],
                                                    dims[1][::-1]]}})
                inner += 1.0
            out.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1,
                        "ts": inner, "dur": 2.0, "args": {"Input Dims": [[]]}})
            if gpu and k_us > 0:
                corr += 1
                out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                            "tid": 1, "ts": inner + 3.0, "dur": 5.0, "args": {"correlation": corr}})
                out.append({"ph": "X", "cat": "kernel", "name": f"kernel_{name[6:]}", "pid": 0,
                            "tid": 7, "ts": start + 30.0, "dur": k_us,
                            "args": {"correlation": corr, "stream": 7, "device": 0}})
                kernel_us[name] = kernel_us.get(name, 0.0) + k_us
            t += max(25.0, k_us)
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
           "traceEvents": out}
    path = Path(path)
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, 1) if path.suffix == ".gz" else data)
    return {"events": len(out), "kernel_us": kernel_us, "busy_us": sum(kernel_us.values())}
