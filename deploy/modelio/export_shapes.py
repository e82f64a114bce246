"""torch.export's `dynamic_shapes` from the config's shape spec: the one program shape that
the ONNX export (stages/export) and the AOTInductor build (stages/inductor) both trace."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploy.spec.config import DeployConfig

if TYPE_CHECKING:
    from torch.export import Dim


def dynamic_shapes(config: DeployConfig) -> tuple[dict[int, Dim], ...]:
    """One `torch.export.Dim` per dim name (shared by every input that names it), with
    the spec's min / max; a named dim whose min equals its max stays static."""
    import torch

    dims: dict[str, torch.export.Dim] = {}
    shapes = []
    for spec in config.inputs:
        axes = {}
        for axis, name in spec.dynamic_axes().items():
            if spec.min[axis] < spec.max[axis]:
                axes[axis] = dims.setdefault(
                    name, torch.export.Dim(name, min=spec.min[axis], max=spec.max[axis])
                )
        shapes.append(axes)
    return tuple(shapes)
