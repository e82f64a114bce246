"""GPU calls for the bench stage, each split the way trtexec reports it: H2D copy of the
inputs from pinned host memory, GPU compute, D2H copy of the outputs into pinned host
memory, timed per call with CUDA events on the current stream; the host wall time of the
whole call is the latency the harness measures around it.

The PyTorch path ran on an H100 (see README); the TensorRT path shares the timing but its
engine calls (TensorRT 10/11 API, type-checked against tensorrt-stubs) never ran here.
Imports torch (and tensorrt for engines).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pipeline.config import DeployConfig
from pipeline.errors import StageFailed
from stages._bench_runtimes import Timed

if TYPE_CHECKING:
    import tensorrt as trt


def _require_cuda() -> None:
    if not torch.cuda.is_available():
        raise StageFailed("device: cuda, but torch sees no CUDA GPU (torch.cuda.is_available() is False)")


def timed(h2d: Callable[[], None], compute: Callable[[], None], d2h: Callable[[], None]) -> Timed:
    """A call that runs the three steps back to back on the current stream, waits for the
    last, and appends their GPU times (ms) to the returned record."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    phases: list[tuple[float, float, float]] = []

    def call() -> None:
        events[0].record()
        h2d()
        events[1].record()
        compute()
        events[2].record()
        d2h()
        events[3].record()
        events[3].synchronize()
        phases.append(tuple(events[i].elapsed_time(events[i + 1]) for i in range(3)))  # type: ignore[arg-type]

    return Timed(call, phases)


def _pinned(arrays: list[np.ndarray]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    host = [torch.from_numpy(np.ascontiguousarray(a)).pin_memory() for a in arrays]
    return host, [torch.empty_like(h, device="cuda") for h in host]


def _copy(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    for target, source in zip(targets, sources):
        target.copy_(source, non_blocking=True)


def torch_module(module: Any, arrays: list[np.ndarray]) -> Timed:
    _require_cuda()
    module = module.to("cuda")
    host, device = _pinned(arrays)
    with torch.inference_mode():
        first = module(*device)
    results = [first] if isinstance(first, torch.Tensor) else list(first)
    outputs = [torch.empty_like(r, device="cpu").pin_memory() for r in results]

    def compute() -> None:
        with torch.inference_mode():
            out = module(*device)
        results[:] = [out] if isinstance(out, torch.Tensor) else list(out)

    return timed(lambda: _copy(device, host), compute, lambda: _copy(outputs, results))


def tensorrt(plan: Path, config: DeployConfig, feeds: dict[str, np.ndarray]) -> Timed:
    """The engine's profile 0 at the feeds' shapes, buffers as torch CUDA tensors."""
    import tensorrt as trt  # noqa: F811 - the real module at run time

    _require_cuda()
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(plan.read_bytes())
    if engine is None:
        raise StageFailed("TensorRT could not deserialize the engine (built by another TensorRT version or GPU?)")
    context = engine.create_execution_context()
    host, device = _pinned([feeds[s.name] for s in config.inputs])
    for spec, buffer in zip(config.inputs, device):
        if not context.set_input_shape(spec.name, tuple(buffer.shape)):
            raise StageFailed(f"the engine rejects input '{spec.name}' of shape {tuple(buffer.shape)}")
        context.set_tensor_address(spec.name, buffer.data_ptr())
    results = [_engine_output(engine, context, out.name) for out in config.outputs]
    outputs = [torch.empty_like(r, device="cpu").pin_memory() for r in results]
    stream = torch.cuda.current_stream()

    def compute() -> None:
        if not context.execute_async_v3(stream.cuda_stream):
            raise StageFailed("TensorRT execute_async_v3 failed")

    return timed(lambda: _copy(device, host), compute, lambda: _copy(outputs, results))


def _engine_output(engine: trt.ICudaEngine, context: trt.IExecutionContext, name: str) -> torch.Tensor:
    import tensorrt as trt

    dims = context.get_tensor_shape(name)
    dtype = torch.from_numpy(np.empty(0, trt.nptype(engine.get_tensor_dtype(name)))).dtype
    buffer = torch.empty(tuple(dims[i] for i in range(len(dims))), dtype=dtype, device="cuda")
    context.set_tensor_address(name, buffer.data_ptr())
    return buffer
