"""export: ONNX with dynamic axes from the shape spec, checked in ONNX Runtime."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gates.tolerance import Tolerance
from modelio.onnx_files import MODEL_FILE, ExternalData
from pipeline.config import DeployConfig
from pipeline.contract import SOURCE_ARTIFACT, Artifact, ArtifactKind, Section, StageContext, StageSpec
from pipeline.errors import StageFailed, root_cause


class ExportParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    opset: int = Field(17, ge=13, le=23, description="ONNX opset version.")
    # torchscript: the legacy exporter (fast); dynamo: torch.export based (needs onnxscript).
    exporter: Literal["torchscript", "dynamo"] = Field(
        "torchscript",
        description="torchscript: the legacy exporter (fast); dynamo: torch.export based (needs onnxscript).",
    )
    constant_folding: bool = Field(True, description="Fold constants during export.")
    external_data: ExternalData = Field(
        ExternalData.AUTO,
        description="Where the weights go: auto keeps them in model.onnx unless they pass 2 GB, then "
        "writes model.onnx.data beside it; always writes them beside it. Later stages keep the layout.",
    )
    tolerance: Tolerance = Field(
        Tolerance(), description="ONNX Runtime vs eager outputs on the golden inputs."
    )


def run(ctx: StageContext, params: ExportParams) -> None:
    import onnx

    from gates import parity, references
    from modelio import onnx_files
    from modelio.loading import load_adapted
    from runtimes.onnxrt import OnnxRuntime

    golden = references.load(ctx.input("golden"))
    model = load_adapted(ctx.config, golden["opt"].inputs).exportable()
    _export(model, ctx, params, golden)
    del model  # a model over 2 GB is in memory once more in ONNX Runtime below
    onnx_files.check(ctx.output("onnx"))
    _record_opset(ctx, onnx.load(str(ctx.output("onnx")), load_external_data=False), params.opset)
    table = parity.compare(
        references.run(OnnxRuntime(ctx.output("onnx"), outputs=ctx.config.output_names()), golden),
        golden,
        params.tolerance,
    )
    ctx.record("parity", parity.to_json(table))
    ctx.headline(
        f"{params.exporter}, opset {ctx.metrics['opset_written']}, {ctx.metrics['nodes']} nodes, "
        f"ORT vs eager: {parity.headline(table, params.tolerance)}"
    )
    parity.gate("ONNX Runtime vs eager", table, params.tolerance)


def dynamic_axes(config: DeployConfig, golden: dict[Any, Any]) -> dict[str, dict[int, str]]:
    """Input axes from the shape spec; output axes where the reference outputs vary."""
    from gates.references import varying_axes

    axes = {spec.name: spec.dynamic_axes() for spec in config.inputs}
    for spec in config.outputs:
        varying = varying_axes(golden, spec.name)
        names = {
            a: (config.batch_dim if a == 0 and config.batch_dim else f"{spec.name}_{a}") for a in varying
        }
        axes[spec.name] = {a: str(n) for a, n in names.items()}
    return {k: v for k, v in axes.items() if v}


def _export(model: Any, ctx: StageContext, params: ExportParams, golden: dict[Any, Any]) -> None:
    import torch

    config = ctx.config
    args = tuple(torch.from_numpy(golden["opt"].inputs[name]) for name in config.input_names())
    try:
        if params.exporter == "dynamo":
            _export_dynamo(model, args, ctx, params)
        else:
            _export_legacy(model, args, ctx, params, golden)
    except Exception as exc:
        # The exporters wrap the error in pages of advice (with colour codes, and "see the
        # stack trace above", which only the log has): the console gets the root cause.
        raise StageFailed(
            f"torch.onnx.export ({params.exporter}) failed: {root_cause(exc)} (full message in the log)"
        ) from exc


def _export_legacy(
    model: Any, args: tuple[Any, ...], ctx: StageContext, params: ExportParams, golden: dict[Any, Any]
) -> None:
    import torch

    from modelio import onnx_files

    config = ctx.config
    torch.onnx.export(
        model,
        args,
        str(ctx.output("onnx")),
        input_names=config.input_names(),
        output_names=config.output_names(),
        dynamic_axes=dynamic_axes(config, golden),
        opset_version=params.opset,
        do_constant_folding=params.constant_folding,
        dynamo=False,
    )
    # Past 2 GB this exporter writes one file per tensor: laid out again as one data file.
    written = ctx.output("onnx")
    if params.external_data is ExternalData.ALWAYS or len(list(written.parent.iterdir())) > 1:
        onnx_files.rewrite(written, external=True)


def _export_dynamo(model: Any, args: tuple[Any, ...], ctx: StageContext, params: ExportParams) -> None:
    """torch.export with `dynamic_shapes` built from the shape spec; the tensor names are
    set on the exported graph afterwards, where a clash with an inner value (MiniLM's
    `embedding` op output) is renamed away instead of breaking SSA form."""
    import torch

    from modelio.adapter import IOAdapter

    shapes = dynamic_shapes(ctx.config)
    program = torch.onnx.export(
        model,
        args,
        None,
        dynamo=True,
        # The adapter takes *args (one entry for all of them); a plain model one per input.
        dynamic_shapes=(shapes,) if isinstance(model, IOAdapter) else shapes,
        opset_version=params.opset,
        optimize=True,
    )
    assert program is not None  # with no file given, the exporter returns the program
    rename_io(program.model.graph, ctx.config.input_names(), ctx.config.output_names())
    program.save(str(ctx.output("onnx")), external_data=_external(program.model, params))


def dynamic_shapes(config: DeployConfig) -> tuple[dict[int, Any], ...]:
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


def rename_io(graph: Any, inputs: list[str], outputs: list[str]) -> None:
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


def _external(model: Any, params: ExportParams) -> bool:
    """Whether an onnx_ir model's weights go beside it (onnx_ir names the file
    `<model file>.data`, as the other writers do)."""
    from modelio.onnx_files import MARGIN, PROTOBUF_LIMIT

    size = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    return params.external_data is ExternalData.ALWAYS or size >= PROTOBUF_LIMIT - MARGIN


def _record_opset(ctx: StageContext, proto: Any, requested: int) -> None:
    written = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    ctx.record("opset_requested", requested)
    ctx.record("opset_written", written)
    ctx.record("nodes", len(proto.graph.node))
    if written != requested:
        ctx.log.warning("asked for opset %s, the exporter wrote opset %s", requested, written)


SPEC = StageSpec(
    name="export",
    version=3,
    params=ExportParams,
    inputs=(SOURCE_ARTIFACT, "golden"),
    outputs=(Artifact("onnx", ArtifactKind.TREE, entry=MODEL_FILE),),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "onnx", "onnxruntime", "onnxscript", "onnx-ir", "numpy"),
    description="ONNX export with dynamic axes; ONNX Runtime parity vs eager",
)
