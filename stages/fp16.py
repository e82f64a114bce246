"""fp16: an FP16 ONNX (I/O kept FP32, numerically sensitive ops kept FP32) with
onnxconverter-common, gated on accuracy against the FP32 model like INT8. It is also
the input of strongly typed TensorRT 11 FP16 builds (build.source: fp16)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from pipeline.config import DeployConfig
from pipeline.errors import Issue
from pipeline.stage import Artifact, Section, StageContext, StageSpec
from stages._datasource import DataSource, fingerprint
from stages._tolerance import AccuracyGate, gate_issues

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


class Fp16Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    keep_fp32_ops: tuple[str, ...] = Field(
        SENSITIVE_OPS, description="ONNX op types kept in FP32 (numerically sensitive)."
    )
    holdout: DataSource = Field(DataSource(count=16), description="Inputs for the accuracy gate.")
    gate: AccuracyGate = Field(
        AccuracyGate(min_cosine=0.999), description="FP16 vs FP32 outputs on the holdout inputs."
    )
    max_finite: float = Field(
        65504.0,
        gt=0,
        description="Constants (weights) beyond ± this are clipped to it when converted (default: FP16's largest finite value).",
    )


def run(ctx: StageContext, params: Fp16Params) -> None:
    import onnx
    from onnxconverter_common import float16

    from stages import _accuracy, _datasource

    model = onnx.load(str(ctx.input("onnx")))
    block = list(float16.DEFAULT_OP_BLOCK_LIST) + list(params.keep_fp32_ops)
    converted = float16.convert_float_to_float16(
        model, keep_io_types=True, op_block_list=block, max_finite_val=params.max_finite
    )
    onnx.save(converted, str(ctx.output("onnx_fp16")))
    holdout = _datasource.load(params.holdout, ctx.config)
    details = {"kept_fp32": list(params.keep_fp32_ops)}
    _accuracy.conclude(ctx, "FP16", ctx.output("onnx_fp16"), holdout, params.gate, details)


def check(params: Fp16Params, config: DeployConfig) -> list[Issue]:
    return gate_issues(params.gate, config.outputs, "stages.fp16")


SPEC = StageSpec(
    name="fp16",
    version=3,
    params=Fp16Params,
    inputs=("onnx",),
    outputs=(
        Artifact("onnx_fp16", filename="model.fp16.onnx"),
        Artifact("accuracy", filename="accuracy.json"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnx", "onnxruntime", "onnxconverter-common", "numpy", "pillow"),
    identity=lambda p: {"holdout_data": fingerprint(p.holdout)},
    check=check,
    description="FP16 ONNX (FP32 I/O and sensitive ops), accuracy-gated against FP32",
)
