"""A TensorRT engine (TensorRT 10/11 API: set_input_shape, set_tensor_address,
execute_async_v3) with torch CUDA tensors as device buffers: `infer` for parity, `timed`
for benchmarks (H2D / compute / D2H).

Type-checked against tensorrt-stubs; **never run here** (no TensorRT, no GPU). The
engine's profile 0 must cover the feeds' shapes. Imports tensorrt and torch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorrt as trt
import torch

from deploy.pipeline.errors import StageFailed
from deploy.runtimes import cuda
from deploy.runtimes.base import Feeds
from deploy.runtimes.timing import Timed


class TensorRTEngine:
    def __init__(self, plan: Path, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        cuda.require_cuda()
        self.engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(plan.read_bytes())
        if self.engine is None:
            raise StageFailed(
                "TensorRT could not deserialize the engine (built by another TensorRT version or GPU?)"
            )
        self.context = self.engine.create_execution_context()
        self.inputs, self._outputs = tuple(inputs), tuple(outputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._outputs

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]:
        device = [torch.from_numpy(np.require(feeds[name], requirements="C")).cuda() for name in self.inputs]
        results = self._bind(device)
        stream = torch.cuda.current_stream()
        self._execute(stream)
        stream.synchronize()
        return {name: buffer.cpu().numpy() for name, buffer in zip(self._outputs, results)}

    def timed(self, feeds: Feeds) -> Timed:
        host, device = cuda.pinned([feeds[name] for name in self.inputs])
        results = self._bind(device)
        outputs = cuda.pinned_like(results)
        stream = torch.cuda.current_stream()
        return cuda.timed(
            lambda: cuda.copy(device, host),
            lambda: self._execute(stream),
            lambda: cuda.copy(outputs, results),
        )

    def _bind(self, device: list[torch.Tensor]) -> list[torch.Tensor]:
        """Sets the input shapes and addresses; returns output buffers, bound too."""
        for name, buffer in zip(self.inputs, device):
            if not self.context.set_input_shape(name, tuple(buffer.shape)):
                raise StageFailed(f"the engine rejects input '{name}' of shape {tuple(buffer.shape)}")
            self.context.set_tensor_address(name, buffer.data_ptr())
        return [self._output(name) for name in self._outputs]

    def _output(self, name: str) -> torch.Tensor:
        dims = self.context.get_tensor_shape(name)
        dtype = torch.from_numpy(np.empty(0, trt.nptype(self.engine.get_tensor_dtype(name)))).dtype
        buffer = torch.empty(tuple(dims[i] for i in range(len(dims))), dtype=dtype, device="cuda")
        self.context.set_tensor_address(name, buffer.data_ptr())
        return buffer

    def _execute(self, stream: torch.cuda.Stream) -> None:
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise StageFailed("TensorRT execute_async_v3 failed")
