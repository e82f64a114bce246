"""The two ONNX exporters, fed the shape spec: the legacy (TorchScript-based) exporter with
dynamic axes, and torch.export with `dynamic_shapes`. Imports torch inside the functions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from deploy.modelio.onnx_files import ExternalData
from deploy.spec.config import DeployConfig
from deploy.stages.export.params import Exporter, ExportParams

if TYPE_CHECKING:
    import onnx_ir as ir
    from torch import Tensor
    from torch.nn import Module

    from deploy.gates.references import Golden
    from deploy.modelio.frozen import FrozenValue


def export(
    exporter: Exporter,
    model: Module,
    config: DeployConfig,
    dest: Path,
    golden: Golden,
    settings: ExportParams,
) -> list[FrozenValue]:
    """Writes the model to `dest` (model.onnx, weights beside it where asked or past 2 GB);
    the values of the data a trace froze (the legacy exporter's TracerWarnings)."""
    import torch

    from deploy.modelio import frozen

    args = tuple(torch.from_numpy(golden["opt"].inputs[name]) for name in config.input_names())
    if exporter is Exporter.DYNAMO:
        _dynamo(model, args, config, dest, settings)
        return []
    with frozen.recording() as found:
        _legacy(model, args, config, dest, golden, settings)
    return frozen.unique(found)


def refused_dims(model: Module, config: DeployConfig, golden: Golden) -> str:
    """torch.export's own reason where the ONNX export came out with dims fixed: torch.onnx
    keeps going on a graph specialized to the example, torch.export alone names the dims
    whose guards do not hold over the declared range ("Constraints violated (height, width)!",
    its guards after it); "" where torch.export keeps them."""
    import torch

    from deploy.modelio import export_shapes
    from deploy.modelio.adapter import IOAdapter

    args = tuple(torch.from_numpy(golden["opt"].inputs[name]) for name in config.input_names())
    shapes = export_shapes.dynamic_shapes(config)
    try:
        torch.export.export(
            model, args, dynamic_shapes=(shapes,) if isinstance(model, IOAdapter) else shapes, strict=False
        )
    except Exception as exc:  # its UserError on violated constraints, or whatever else it met
        return str(exc).strip()
    return ""


def dynamic_axes(config: DeployConfig, golden: Golden) -> dict[str, dict[int, str]]:
    """Input axes from the shape spec; output axes where the reference outputs vary."""
    from deploy.gates.references import varying_axes

    axes = {spec.name: spec.dynamic_axes() for spec in config.inputs}
    for spec in config.outputs:
        varying = varying_axes(golden, spec.name)
        names = {
            a: (config.batch_dim if a == 0 and config.batch_dim else f"{spec.name}_{a}") for a in varying
        }
        axes[spec.name] = {a: str(n) for a, n in names.items()}
    return {k: v for k, v in axes.items() if v}


def _legacy(
    model: Module,
    args: tuple[Tensor, ...],
    config: DeployConfig,
    dest: Path,
    golden: Golden,
    settings: ExportParams,
) -> None:
    import warnings

    import torch

    from deploy.modelio import onnx_files

    with warnings.catch_warnings():
        # Its deprecation is this stage's business (auto moves past it), not the log's on every run.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="torch.onnx")
        torch.onnx.export(
            model,
            args,
            str(dest),
            input_names=config.input_names(),
            output_names=config.output_names(),
            dynamic_axes=dynamic_axes(config, golden),
            opset_version=settings.opset_for(Exporter.TORCHSCRIPT),
            do_constant_folding=settings.constant_folding,
            dynamo=False,
        )
    # Past 2 GB this exporter writes one file per tensor: laid out again as one data file.
    if settings.external_data is ExternalData.ALWAYS or len(list(dest.parent.iterdir())) > 1:
        onnx_files.rewrite(dest, external=True)


def _dynamo(
    model: Module, args: tuple[Tensor, ...], config: DeployConfig, dest: Path, settings: ExportParams
) -> None:
    """torch.export with `dynamic_shapes` built from the shape spec; the tensor names are
    set on the exported graph afterwards, where a clash with an inner value (MiniLM's
    `embedding` op output) is renamed away instead of breaking SSA form."""
    import torch

    from deploy.modelio import export_shapes
    from deploy.modelio.adapter import IOAdapter

    shapes = export_shapes.dynamic_shapes(config)
    program = torch.onnx.export(
        model,
        args,
        None,
        dynamo=True,
        # The adapter takes *args (one entry for all of them); a plain model one per input.
        dynamic_shapes=(shapes,) if isinstance(model, IOAdapter) else shapes,
        opset_version=settings.opset_for(Exporter.DYNAMO),
        optimize=True,
    )
    assert program is not None  # with no file given, the exporter returns the program
    rename_io(program.model.graph, config.input_names(), config.output_names())
    program.save(str(dest), external_data=_external(program.model, settings.external_data))


def rename_io(graph: ir.Graph, inputs: list[str], outputs: list[str]) -> None:
    """Names the graph's inputs and outputs as the config does (onnx_ir values: renaming
    one renames every use)."""
    import onnx_ir as ir

    taken = {v.name: v for node in ir.traversal.RecursiveGraphIterator(graph) for v in node.outputs}
    taken.update({v.name: v for v in graph.inputs})
    pairs = list(zip(graph.inputs, inputs)) + list(zip(graph.outputs, outputs))
    for value, name in pairs:
        other = taken.get(name)
        if other is not None and other is not value:
            other.name = f"{name}__inner"
        value.name = name


def _external(model: ir.Model, external_data: ExternalData) -> bool:
    """Whether an onnx_ir model's weights go beside it (onnx_ir names the file
    `<model file>.data`, as the other writers do)."""
    from deploy.modelio.onnx_files import MARGIN, PROTOBUF_LIMIT

    size = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    return external_data is ExternalData.ALWAYS or size >= PROTOBUF_LIMIT - MARGIN
