"""openvino_int8: the FP32 OpenVINO IR quantized to INT8 with NNCF's post-training
quantization on the calibration inputs the config declares, judged by the same accuracy
gate as quantize's ONNX Runtime INT8 (against the FP32 ONNX in ONNX Runtime, on the
held-out inputs), with the same fallback semantics: the plain INT8 model first; only when
the gate fails and `auto` is set, NNCF's accuracy control reverts the most sensitive
operations to floating point (up to `max_float_nodes` reverts) until the drop in cosine to
FP32 is within the gate, and the gate judges the result.

Transformers want `model_type: transformer` (NNCF's recipe that leaves the attention's
softmax and normalisations unquantized): on MiniLM's sentences the default recipe scores
cosine 0.09 and twelve accuracy-control reverts reach only 0.94, the transformer recipe
0.996 at once."""

from __future__ import annotations

from deploy.domain.artifacts import OPENVINO
from deploy.domain.issues import Issue
from deploy.gates.tolerance import decoder_issues, gate_issues
from deploy.pipeline.graph.contract import Artifact, ArtifactKind, Section, StageContext, StageSpec
from deploy.spec.config import DeployConfig
from deploy.stages.openvino_int8.nncf_params import IR_FILE, STAGE, NncfParams, ir_path


def check(params: NncfParams, config: DeployConfig) -> list[Issue]:
    where = f"stages.{STAGE}"
    return gate_issues(params.gate, config.outputs, where) + decoder_issues(
        params.auto, config.model.decoder, where
    )


def run(ctx: StageContext, params: NncfParams) -> None:
    from deploy.datasources import datasource
    from deploy.gates import accuracy
    from deploy.runtimes.files import runtime_for
    from deploy.stages.openvino_int8 import quantizer

    if ctx.config.model.decoder is not None:
        return _decoder(ctx, params)
    calibration = datasource.load(params.calibration, ctx.config)
    holdout = datasource.load(params.holdout_source(), ctx.config)
    evidence = datasource.evidence(params.holdout_source(), params.evidence_key(STAGE))
    dest = ctx.output(STAGE)
    dest.parent.mkdir(parents=True, exist_ok=True)
    details = quantizer.quantize(ctx, params, calibration, holdout, dest)
    accuracy.conclude(
        ctx,
        "OpenVINO INT8 (NNCF)",
        dest,
        holdout,
        params.gate,
        details,
        "accuracy_openvino_int8",
        evidence,
        load=runtime_for,  # OpenVINO computing in f32: the gate judges INT8's error, not bf16's
        baseline=ir_path(ctx.input(OPENVINO)),
    )


def _decoder(ctx: StageContext, params: NncfParams) -> None:
    """A decoder's INT8: NNCF's weight compression (int8 weights, float activations: the
    cache is an activation no calibration samples), gated on its generations."""
    from deploy.gates import decoder_gate
    from deploy.runtimes.files import runtime_for
    from deploy.stages.openvino_int8 import quantizer

    dest = ctx.output(STAGE)
    dest.parent.mkdir(parents=True, exist_ok=True)
    details = quantizer.compress_weights(ctx, dest)
    label = "OpenVINO INT8 weights (NNCF)"
    baseline = ir_path(ctx.input(OPENVINO))
    gate = params.gate.decoder
    decoder_gate.conclude(
        ctx, label, dest, gate, details, "accuracy_openvino_int8", load=runtime_for, baseline=baseline
    )


SPEC = StageSpec(
    name=STAGE,
    version=3,  # 3: speed vs FP32 timed in ABBA rounds (interval, stable, contended: accuracy.json schema 3); 2: a decoder's weights compressed, gated on its generations (gate.decoder)
    params=NncfParams,
    inputs=("openvino", "onnx"),
    outputs=(
        Artifact(STAGE, ArtifactKind.TREE, entry=IR_FILE),
        Artifact("accuracy_openvino_int8", filename="accuracy.json"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("openvino", "nncf", "onnxruntime", "numpy", "pillow", "tokenizers"),
    identity=lambda p: p.data_identity(),
    check=check,
    description="INT8 OpenVINO IR by NNCF post-training quantization, gated like quantize's INT8 against "
    "FP32, NNCF's accuracy control as the automatic fallback",
    timeout_s=3600,
)
