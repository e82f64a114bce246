"""Runs a TensorRT engine on golden inputs (TensorRT 10/11 API: set_input_shape,
set_tensor_address, execute_async_v3), with torch CUDA tensors as device buffers.

Type-checked against tensorrt-stubs; **never run here** (no TensorRT, no GPU). Used by
`validate` when an engine exists; imports tensorrt and torch at module level.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorrt as trt
import torch

from pipeline.config import DeployConfig, Label
from pipeline.errors import StageFailed
from stages._golden import Case


def run_golden(plan: Path, config: DeployConfig, golden: dict[Label, Case]) -> dict[Label, dict[str, np.ndarray]]:
    logger = trt.Logger(trt.Logger.WARNING)
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan.read_bytes())
    if engine is None:
        raise StageFailed("TensorRT could not deserialize the engine (built by another TensorRT version or GPU?)")
    context = engine.create_execution_context()
    stream = torch.cuda.Stream()
    return {label: _infer(engine, context, stream, config, case) for label, case in golden.items()}


def _infer(
    engine: trt.ICudaEngine, context: trt.IExecutionContext, stream: torch.cuda.Stream, config: DeployConfig, case: Case
) -> dict[str, np.ndarray]:
    # Profile 0 is the active one: the golden shapes are the shape spec's, which the
    # default profile covers.
    buffers: dict[str, torch.Tensor] = {}
    for spec in config.inputs:
        tensor = torch.from_numpy(np.ascontiguousarray(case.inputs[spec.name])).cuda()
        if not context.set_input_shape(spec.name, tuple(tensor.shape)):
            raise StageFailed(f"the engine rejects input '{spec.name}' of shape {tuple(tensor.shape)}")
        context.set_tensor_address(spec.name, tensor.data_ptr())
        buffers[spec.name] = tensor
    for out in config.outputs:
        dims = context.get_tensor_shape(out.name)
        shape = tuple(dims[i] for i in range(len(dims)))
        dtype = torch.from_numpy(np.empty(0, trt.nptype(engine.get_tensor_dtype(out.name)))).dtype
        buffers[out.name] = torch.empty(shape, dtype=dtype, device="cuda")
        context.set_tensor_address(out.name, buffers[out.name].data_ptr())
    if not context.execute_async_v3(stream.cuda_stream):
        raise StageFailed("TensorRT execute_async_v3 failed")
    stream.synchronize()
    return {out.name: buffers[out.name].cpu().numpy() for out in config.outputs}
