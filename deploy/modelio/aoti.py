"""Building an AOTInductor package (`model.pt2`): the adapted model traced by torch.export
with the shape spec's dynamic dims (modelio/export_shapes, as the ONNX export traces it)
and compiled by TorchInductor. Used by the inductor stages (FP32, FP16, bf16); imports
torch, so a stage imports it inside its run function."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from deploy.domain.vocabulary import Precision
from deploy.modelio import export_shapes
from deploy.pipeline.errors import StageFailed, clip
from deploy.spec.config import DeployConfig

DTYPES = {Precision.FP32: torch.float32, Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}


class Reduced(torch.nn.Module):
    """The model computing in `dtype` behind the FP32 calling convention: floating inputs
    are cast in and floating outputs cast back to FP32 inside the compiled program, so a
    reduced-precision package is served and benched with the config's declared I/O."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.model, self.dtype = model.to(dtype), dtype

    def forward(self, *args: torch.Tensor) -> Any:
        cast = [a.to(self.dtype) if a.is_floating_point() else a for a in args]
        return torch.utils._pytree.tree_map_only(torch.Tensor, _fp32, self.model(*cast))


def _fp32(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.is_floating_point() else tensor


def build(
    model: torch.nn.Module, args: tuple[torch.Tensor, ...], config: DeployConfig, package: Path
) -> float:
    """Traces `model` on `args` and compiles it into `package`; the compile time in seconds."""
    program = _export(model, args, config)
    package.parent.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    _compile(program, package)
    return round(time.perf_counter() - began, 2)


def _export(model: torch.nn.Module, args: tuple[torch.Tensor, ...], config: DeployConfig) -> Any:
    try:
        with torch.no_grad():  # the adapter takes *args: one dynamic_shapes entry for all of them
            return torch.export.export(model, args, dynamic_shapes=(export_shapes.dynamic_shapes(config),))
    except Exception as exc:
        raise StageFailed(
            f"torch.export cannot trace the model, so TorchInductor cannot compile it ahead of time: "
            f"{type(exc).__name__}: {clip(str(exc), 300)} (remove the inductor stages; the ONNX path does not need them)"
        ) from exc


def _compile(program: Any, package: Path) -> None:
    import torch._inductor

    try:
        torch._inductor.aoti_compile_and_package(program, package_path=str(package))
    except Exception as exc:  # no C++ compiler, an op Inductor lowers wrongly, ...
        raise StageFailed(
            f"AOTInductor failed to compile: {type(exc).__name__}: {clip(str(exc), 300)}"
        ) from exc


def batch_range(config: DeployConfig) -> tuple[int, int] | None:
    """The batch range a package compiled from the shape spec answers (None: fixed shapes)."""
    if config.batch_dim is None:
        return None
    first = config.inputs[0]
    axis = next((a for a, name in first.dynamic_axes().items() if name == config.batch_dim), None)
    return None if axis is None else (first.min[axis], first.max[axis])
