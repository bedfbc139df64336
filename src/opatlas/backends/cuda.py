"""PyTorch on an NVIDIA GPU.

Timing modes (``timing=`` backend option):

* ``events`` (default): a CUDA event pair around each repeat of the op;
* ``profiler``: the sum of the durations of the GPU kernels the op launched in each repeat
  (``torch.profiler``), not the first-to-last span, so gaps and launch latency are excluded.

Other options: ``graphs=1`` captures the forward pass in a CUDA graph and times ``graph_replays``
replays per sample (for ops of a few µs, where launch overhead would dominate);
``flush_l2=1`` overwrites a buffer twice the L2 size before each repeat, so every repeat starts
cold; ``min_time_ms=T`` times each pass for at least T ms: after the asked repeats, more at
their mean duration fill the rest (at most 10,000 samples), so a sweep of 20 µs ops keeps the
GPU busy instead of paying each vector's fixed overhead for 20 samples. OOM is reported as such
and the allocator is emptied so the sweep can go on.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Mapping, Sequence
from typing import Any

from opatlas.backends.base import Backend, filled_samples, min_time_ns, min_time_version
from opatlas.backends.cpu import TORCH_DTYPES, warm_torch
from opatlas.ops.base import Op


class CudaBackend(Backend):
    name = "cuda"
    dtypes = TORCH_DTYPES

    def __init__(self, timing: str = "events", graphs: bool | str = False,
                 flush_l2: bool | str = False, graph_replays: int | str = 20,
                 device: int | str = 0, min_time_ms: float | str | None = None) -> None:
        if timing not in ("events", "profiler"):
            raise ValueError(f"timing must be 'events' or 'profiler', got {timing!r}")
        self.timing = timing
        self.graphs = str(graphs).lower() in ("1", "true", "yes")
        self.flush_l2 = str(flush_l2).lower() in ("1", "true", "yes")
        self.graph_replays = int(graph_replays)
        self.index = int(device)
        self.min_time_ns = min_time_ns(min_time_ms)
        self._flush_buf: Any = None

    def available(self) -> tuple[bool, str]:
        try:
            import torch
        except ImportError:
            return False, "PyTorch is not installed (pip install 'opatlas[torch]')"
        if not torch.cuda.is_available():
            return False, "no CUDA device is visible to PyTorch (torch.cuda.is_available() is False)"
        return True, ""

    def start(self) -> None:
        """The CUDA context, cuBLAS and autograd on this device, before the first vector."""
        import torch

        torch.cuda.set_device(self.index)
        warm_torch(f"cuda:{self.index}")
        torch.cuda.synchronize()

    def device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(self.index).replace(" ", "")

    def versions(self) -> dict[str, str]:
        import platform

        import torch

        out = {"python": platform.python_version(), "torch": torch.__version__,
               "cuda": str(torch.version.cuda), "timing": self.timing}
        out.update(min_time_version(self.min_time_ns))
        with contextlib.suppress(Exception):  # private API: best effort
            out["driver"] = str(torch._C._cuda_getDriverVersion())
        if torch.backends.cudnn.is_available():
            out["cudnn"] = str(torch.backends.cudnn.version())
        return out

    def _flush(self) -> None:
        import torch

        if self._flush_buf is None:
            props = torch.cuda.get_device_properties(self.index)
            l2 = getattr(props, "L2_cache_size", 64 * 2**20) or 64 * 2**20
            self._flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device=f"cuda:{self.index}")
        self._flush_buf.zero_()

    def measure(self, op: Op, params: Mapping[str, Any], passes: Sequence[str], repeats: int,
                warmup: int) -> dict[str, list[int]]:
        import torch

        device = f"cuda:{self.index}"
        torch.cuda.set_device(self.index)
        state = op.build(params, device)
        out: dict[str, list[int]] = {}
        for pass_ in passes:
            for _ in range(warmup):
                op.execute(state, pass_, op.prepare(state, pass_))
            torch.cuda.synchronize()
            out[pass_] = filled_samples(lambda n, p=pass_: self._samples(op, state, p, n),
                                        repeats, self.min_time_ns)
        return out

    def _samples(self, op: Op, state: Any, pass_: str, repeats: int) -> list[int]:
        if self.graphs and pass_ == "fwd":
            return self._graph_samples(op, state, repeats)
        if self.timing == "profiler":
            return self._profiler_samples(op, state, pass_, repeats)
        return self._event_samples(op, state, pass_, repeats)

    def _ready(self, op: Op, state: Any, pass_: str) -> Any:
        """The untimed work before one timed repeat: the op's preparation, then an L2 flush
        when asked, so the repeat starts cold."""
        prepared = op.prepare(state, pass_)
        if self.flush_l2:
            self._flush()
        return prepared

    def _event_samples(self, op: Op, state: Any, pass_: str, repeats: int) -> list[int]:
        import torch

        pairs = []
        for _ in range(repeats):
            prepared = self._ready(op, state, pass_)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            op.execute(state, pass_, prepared)
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return [int(s.elapsed_time(e) * 1e6) for s, e in pairs]

    def _profiler_samples(self, op: Op, state: Any, pass_: str, repeats: int) -> list[int]:
        import torch
        from torch.profiler import ProfilerActivity, profile

        samples = []
        for _ in range(repeats):
            prepared = self._ready(op, state, pass_)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                op.execute(state, pass_, prepared)
                torch.cuda.synchronize()
            samples.append(int(sum(kernel_durations_us(prof)) * 1000))
        return samples

    def _graph_samples(self, op: Op, state: Any, repeats: int) -> list[int]:
        import torch

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            op.execute(state, "fwd", None)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            op.execute(state, "fwd", None)
        samples = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.graph_replays):
                graph.replay()
            end.record()
            torch.cuda.synchronize()
            samples.append(int(start.elapsed_time(end) * 1e6 / self.graph_replays))
        return samples

    def cleanup(self) -> None:
        import torch

        gc.collect()
        torch.cuda.empty_cache()


def kernel_durations_us(prof: Any) -> list[float]:
    """Durations (µs) of the device kernels in a finished ``torch.profiler`` session."""
    out = []
    for evt in prof.events():
        dev = str(getattr(evt, "device_type", ""))
        if dev.endswith("CUDA") and not getattr(evt, "is_user_annotation", False):
            dur = getattr(evt, "device_time", None) or getattr(evt, "cuda_time", 0.0)
            out.append(float(dur))
    return out
