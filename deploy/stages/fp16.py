"""fp16: an FP16 ONNX (I/O kept FP32, numerically sensitive ops kept FP32) with
onnxconverter-common, gated on accuracy against the FP32 model like INT8. It is also
the input of strongly typed TensorRT 11 FP16 builds (build.source: fp16)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from deploy.datasources.datasource import DataSource, fingerprint
from deploy.domain.artifacts import ONNX
from deploy.domain.issues import Issue
from deploy.gates.tolerance import AccuracyGate, AutoFallback, decoder_issues, gate_issues
from deploy.modelio.onnx_files import MODEL_FILE
from deploy.pipeline.graph.contract import Artifact, ArtifactKind, Section, StageContext, StageSpec
from deploy.runtimes.base import Device
from deploy.spec.config import DeployConfig

if TYPE_CHECKING:
    import onnx

# Reductions, exponentials and normalisations overflow or lose precision in FP16.
SENSITIVE_OPS = (
    "Softmax",
    "LogSoftmax",
    "ReduceMean",
    "ReduceSum",
    "ReduceL2",
    "Exp",
    "Log",
    "Pow",
    "LayerNormalization",
    "Erf",
)


class Fp16Params(AutoFallback):
    keep_fp32_ops: tuple[str, ...] = Field(
        SENSITIVE_OPS, description="ONNX op types kept in FP32 (numerically sensitive)."
    )
    holdout: DataSource = Field(DataSource(count=16), description="Inputs for the accuracy gate.")
    calibration: DataSource = Field(
        DataSource(count=8, seed=4321),
        description="auto: inputs on which the nodes' sensitivity is ranked (not the held-out ones the gate judges).",
    )
    gate: AccuracyGate = Field(
        AccuracyGate(min_cosine=0.999), description="FP16 vs FP32 outputs on the holdout inputs."
    )
    max_finite: float = Field(
        65504.0,
        gt=0,
        description="Constants (weights) beyond ± this are clipped to it when converted (default: FP16's largest finite value).",
    )


def run(ctx: StageContext, params: Fp16Params) -> None:
    from deploy.datasources import datasource
    from deploy.gates import fallback

    # A decoder is judged on prompts (gates/decoder_gate.py), not on these feeds.
    decoder = ctx.config.model.decoder is not None
    holdout = [] if decoder else datasource.load(params.holdout, ctx.config)
    calibration = datasource.load(params.calibration, ctx.config) if params.auto else []
    blocked = _blocked(params)
    conversion = fallback.Conversion(
        "FP16",
        "onnx_fp16",
        "accuracy_fp16",
        lambda kept, dest: _convert(ctx.input(ONNX), dest, blocked, kept, params.max_finite),
        ctx.input(ONNX),
        lambda node, _converted: node.op_type not in blocked,
        target=Device.CUDA,  # FP16 pays on a GPU; ONNX Runtime's CPU runs it through casts
    )
    details = {"kept_fp32": list(params.keep_fp32_ops)}
    evidence = datasource.evidence(params.holdout, "stages.fp16.holdout")
    fallback.conclude(ctx, conversion, calibration, holdout, params.gate, params, details, evidence)


def _blocked(params: Fp16Params) -> frozenset[str]:
    from onnxconverter_common import float16

    return frozenset([*float16.DEFAULT_OP_BLOCK_LIST, *params.keep_fp32_ops])


def _convert(
    source: Path, dest: Path, blocked: frozenset[str], kept: tuple[str, ...], max_finite: float
) -> None:
    """FP16 with FP32 I/O; blocked op types and the `kept` nodes stay FP32."""
    import onnx
    from onnxconverter_common import float16

    from deploy.modelio import onnx_files

    model = onnx.load(str(source))
    _unshare(model.graph, set(kept))
    converted: onnx.ModelProto = float16.convert_float_to_float16(
        model,
        keep_io_types=True,
        op_block_list=sorted(blocked),
        node_block_list=list(kept),
        max_finite_val=max_finite,
    )
    _feed_fp32(converted, set(kept))
    onnx_files.save(converted, dest, onnx_files.uses_external_data(source))


def _unshare(graph: onnx.GraphProto, kept: set[str]) -> None:
    """Gives each kept node weights of its own: an Identity of a weight (onnxsim shares
    equal weights that way) becomes a copy of it, and a weight a kept node shares with
    another node is copied for the kept one. onnxconverter-common converts a shared
    weight for one side and leaves the other reading the wrong type."""
    weights = {w.name: w for w in graph.initializer}
    for node in [n for n in graph.node if n.op_type == "Identity" and n.input[0] in weights]:
        graph.initializer.append(_copy(weights[node.input[0]], node.output[0]))
        graph.node.remove(node)
    weights = {w.name: w for w in graph.initializer}
    for node in [n for n in graph.node if n.name in kept]:
        for k, name in enumerate(node.input):
            if name in weights:
                node.input[k] = f"{name}_{node.name}"
                graph.initializer.append(_copy(weights[name], node.input[k]))


def _copy(weight: onnx.TensorProto, name: str) -> onnx.TensorProto:
    copy = type(weight)()  # the proto's own class: onnx is imported only when the stage runs
    copy.CopyFrom(weight)
    copy.name = name
    return copy


def _feed_fp32(converted: onnx.ModelProto, kept: set[str]) -> None:
    """onnxconverter-common (1.16) leaves some nodes of node_block_list reading FP16
    tensors (weights it converted, shared ones behind an Identity) and stale FP16 /
    FP32 annotations: the annotations go (ONNX Runtime infers types), and every FP16
    input of a kept node gets a Cast to FP32 in front of it."""
    import onnx
    from onnx import TensorProto, helper

    graph = converted.graph
    del graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(converted).graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.input]}
    types |= {w.name: w.data_type for w in graph.initializer}
    for node in [n for n in graph.node if n.name in kept]:
        for k, name in enumerate(node.input):
            if types.get(name) == TensorProto.FLOAT16:
                cast = helper.make_node("Cast", [name], [f"{name}_fp32_{node.name}"], to=TensorProto.FLOAT)
                graph.node.insert(list(graph.node).index(node), cast)
                node.input[k] = cast.output[0]


def check(params: Fp16Params, config: DeployConfig) -> list[Issue]:
    where = "stages.fp16"
    return gate_issues(params.gate, config.outputs, where) + decoder_issues(
        params.auto, config.model.decoder, where
    )


SPEC = StageSpec(
    name="fp16",
    version=10,  # 10: speed vs FP32 timed in ABBA rounds (interval, stable, contended: accuracy.json schema 3); 9: a decoder gated on its generations (gate.decoder); 8: its CPU timing said to be one, not FP16's verdict; 7: accuracy.json says what its held-out inputs were; 6: a versioned record; 5: a directory
    params=Fp16Params,
    inputs=("onnx",),
    outputs=(
        Artifact("onnx_fp16", ArtifactKind.TREE, entry=MODEL_FILE),
        Artifact("accuracy_fp16", filename="accuracy.json"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnx", "onnxruntime", "onnxconverter-common", "numpy", "pillow", "tokenizers"),
    identity=lambda p: {
        "holdout_data": fingerprint(p.holdout),
        "calibration_data": fingerprint(p.calibration),
        "decoder_prompts": p.gate.decoder.identity(),
    },
    check=check,
    description="FP16 ONNX (FP32 I/O and sensitive ops), accuracy-gated against FP32",
)
