"""quantize: post-training INT8 ONNX (onnxruntime.quantization), gated on accuracy
against the FP32 model on held-out inputs, with an automatic FP32 fallback.

Recipes. `static` (Q/DQ, calibrated activation ranges): the settings follow the target.
TensorRT (explicit quantization, strongly typed builds): symmetric int8 activations and
weights. ONNX Runtime on CPU: uint8 activations, which its kernels fuse completely; with
symmetric int8 activations ORT keeps many convolutions in float and the model is *slower*
than FP32 (resnet50: 32 ms vs 27 ms FP32 vs 9.5 ms uint8 at batch 1 on 2 cores).
`dynamic`: int8 weights, activations quantized at run time (ONNX Runtime's recipe for
transformer MatMul / Gemm on CPU): no calibrated ranges, so a -inf attention-mask fill
cannot break it. `op_types` and `exclude` choose what is quantized; `auto` keeps the most
sensitive nodes in FP32 until the gate passes (gates/fallback.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.domain.artifacts import ONNX, ONNX_INT8
from deploy.domain.issues import Issue
from deploy.gates.tolerance import decoder_issues, gate_issues
from deploy.modelio.onnx_files import MODEL_FILE
from deploy.pipeline.errors import MissingDependency, StageFailed
from deploy.pipeline.graph.contract import Artifact, ArtifactKind, Section, StageContext, StageSpec
from deploy.runtimes.base import Feeds
from deploy.spec.config import DeployConfig
from deploy.stages.quantize.calibration import Method, Step
from deploy.stages.quantize.params import Int8Target, QuantizeParams, Quantizer, Recipe

if TYPE_CHECKING:
    from onnx import NodeProto

    from deploy.gates.fallback import ConvertedGraph


def check(params: QuantizeParams, config: DeployConfig) -> list[Issue]:
    where = "stages.quantize"
    issues = gate_issues(params.gate, config.outputs, where)
    if params.recipe == Recipe.DYNAMIC and params.target == Int8Target.TENSORRT:
        issues.append(
            Issue(f"{where}.recipe", "TensorRT needs static Q/DQ (calibrated ranges): use recipe: static")
        )
    if params.quantizer == Quantizer.MODELOPT:
        issues += _modelopt_issues(params, where)
    if config.model.decoder is not None and params.recipe != Recipe.DYNAMIC:
        issues.append(
            Issue(
                f"{where}.recipe",
                "a decoder is quantized dynamically (int8 weights; its activations include the cache, "
                "which calibration does not sample): use recipe: dynamic",
            )
        )
    return issues + decoder_issues(params.auto, config.model.decoder, where)


def _modelopt_issues(params: QuantizeParams, where: str) -> list[Issue]:
    chosen = [k for k in ("op_types", "auto") if getattr(params, k)] + (["exclude"] if params.exclude else [])
    issues = [Issue(f"{where}.{k}", "only with quantizer: onnxruntime") for k in chosen]
    if params.target != Int8Target.TENSORRT:
        issues.append(Issue(f"{where}.quantizer", "modelopt writes Q/DQ for TensorRT: set target: tensorrt"))
    if params.recipe != Recipe.STATIC:
        issues.append(Issue(f"{where}.recipe", "modelopt quantizes statically (recipe: static)"))
    if params.method == Method.PERCENTILE:
        issues.append(Issue(f"{where}.method", "modelopt calibrates with minmax ('max') or entropy only"))
    return issues


def run(ctx: StageContext, params: QuantizeParams) -> None:
    from deploy.datasources import datasource
    from deploy.gates import accuracy, fallback

    # A decoder is judged on prompts (gates/decoder_gate.py) and quantized without ranges.
    decoder = ctx.config.model.decoder is not None
    calibration = [] if decoder else datasource.load(params.calibration, ctx.config)
    holdout = [] if decoder else datasource.load(params.holdout_source(), ctx.config)
    evidence = datasource.evidence(params.holdout_source(), params.evidence_key("quantize"))
    details = {
        "target": params.target,
        "recipe": params.recipe,
        "method": params.method if params.recipe == Recipe.STATIC else None,
        "op_types": list(params.op_types) if params.op_types else "all",
        "exclude": list(params.exclude),
        "calibration_samples": len(calibration),
    }
    if params.quantizer == Quantizer.MODELOPT:
        _quantize_modelopt(ctx.input(ONNX), ctx.output(ONNX_INT8), calibration, params)
        accuracy.conclude(
            ctx, "INT8", ctx.output(ONNX_INT8), holdout, params.gate, details, "accuracy_int8", evidence
        )
        return
    model = _prepared(ctx.input(ONNX), params, ctx.workdir)
    _check_names(model, params.exclude)
    quantize = _Quantizer(model, params, calibration, ctx.workdir)
    quantize.step = ctx.progress
    conversion = fallback.Conversion(
        "INT8",
        "onnx_int8",
        "accuracy_int8",
        quantize.build,
        model,
        partial(_eligible, params, _supported(params)),
    )
    fallback.conclude(ctx, conversion, calibration, holdout, params.gate, params, details, evidence)


def _prepared(source: Path, params: QuantizeParams, work: Path) -> Path:
    """ORT's quant_pre_process when asked: node names in `exclude` and in the fallback's
    ranking are this model's."""
    if not params.preprocess:
        return source
    from onnxruntime.quantization import shape_inference

    from deploy.modelio import onnx_files

    model = work / "preprocessed.onnx"
    external = onnx_files.uses_external_data(source)
    shape_inference.quant_pre_process(
        str(source),
        str(model),
        skip_symbolic_shape=True,
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        external_data_location=model.name + onnx_files.DATA_SUFFIX if external else None,
    )
    return model


def _check_names(model: Path, exclude: tuple[str, ...]) -> None:
    """A name that matches no node would silently exclude nothing: a typo, reported."""
    import onnx

    names = {n.name for n in onnx.load(str(model), load_external_data=False).graph.node}
    unknown = [name for name in exclude if name not in names]
    if unknown:
        sample = ", ".join(sorted(names)[:5])
        raise StageFailed(
            f"stages.quantize.exclude: no node named {unknown} in the model to quantize (names look like: {sample})"
        )


def _supported(params: QuantizeParams) -> frozenset[str]:
    """The op types the recipe quantizes when op_types is null."""
    from onnxruntime.quantization.registry import IntegerOpsRegistry, QDQRegistry

    registry = IntegerOpsRegistry if params.recipe == Recipe.DYNAMIC else QDQRegistry
    return frozenset(params.op_types or registry)


def _eligible(
    params: QuantizeParams, supported: frozenset[str], node: NodeProto, converted: ConvertedGraph
) -> bool:
    return node.op_type in supported and node.name not in params.exclude and converted.quantized(node)


class _Quantizer:
    """Writes the INT8 model for a set of nodes kept in FP32 (on top of `exclude`);
    calibration runs once, on the first call of the static recipe."""

    def __init__(self, model: Path, params: QuantizeParams, calibration: Sequence[Feeds], work: Path) -> None:
        from deploy.modelio import onnx_files

        self.model, self.params, self.calibration, self.work = model, params, calibration, work
        self._cache: Path | None = None
        self.step: Step | None = None  # calibration's progress (StageContext.progress)
        # The quantized model keeps its source's layout (weights beside it or inside).
        self.external = onnx_files.uses_external_data(model)

    def build(self, kept_float: tuple[str, ...], dest: Path) -> None:
        exclude = [*self.params.exclude, *kept_float]
        if self.params.recipe == Recipe.DYNAMIC:
            self._dynamic(exclude, dest)
        else:
            self._static(exclude, dest)

    def _dynamic(self, exclude: list[str], dest: Path) -> None:
        from onnxruntime import quantization as q

        # The dynamic quantizer first rewrites a Gemm X as MatMul X_MatMul + Add X_Add and
        # matches nodes_to_exclude against the rewritten graph: X alone would exclude nothing.
        rewritten = [f"{name}_MatMul" for name in exclude]
        q.quantize_dynamic(
            str(self.model),
            str(dest),
            op_types_to_quantize=list(self.params.op_types or []),
            per_channel=self.params.per_channel,
            weight_type=q.QuantType.QInt8,
            nodes_to_exclude=[*exclude, *rewritten],
            use_external_data_format=self.external,
        )

    def _static(self, exclude: list[str], dest: Path) -> None:
        from onnxruntime import quantization as q

        from deploy.stages.quantize import calibration

        if self._cache is None:
            scope = calibration.Scope(self.params.op_types, self.params.exclude)
            self._cache = calibration.calibrate(
                self.model, self.calibration, self.params.method, self.work, scope, self.step
            )
        tensorrt = self.params.target == Int8Target.TENSORRT
        q.quantize_static(
            str(self.model),
            str(dest),
            None,
            quant_format=q.QuantFormat.QDQ,
            op_types_to_quantize=list(self.params.op_types or []),
            per_channel=self.params.per_channel,
            activation_type=q.QuantType.QInt8 if tensorrt else q.QuantType.QUInt8,
            weight_type=q.QuantType.QInt8,
            nodes_to_exclude=exclude,
            calibrate_method=calibration.ort_method(self.params.method),
            extra_options={"ActivationSymmetric": tensorrt, "WeightSymmetric": True},
            calibration_cache_path=str(self._cache),
            use_external_data_format=self.external,
        )


def _quantize_modelopt(
    source: Path, dest: Path, calibration: Sequence[Feeds], params: QuantizeParams
) -> None:
    """ModelOpt's documented API: quantize(onnx_path, quantize_mode, calibration_data,
    calibration_method, calibration_eps, output_path). Unverified: not installable here."""
    import numpy as np

    try:
        from modelopt.onnx.quantization import quantize
    except ImportError as exc:
        raise MissingDependency(f"NVIDIA ModelOpt ({exc})", "pip install 'nvidia-modelopt[onnx]'") from exc
    data = {name: np.concatenate([sample[name] for sample in calibration]) for name in calibration[0]}
    quantize(
        onnx_path=str(source),
        quantize_mode="int8",
        calibration_data=data,
        calibration_method={"minmax": "max", "entropy": "entropy"}[params.method],
        calibration_eps=["cpu"],
        output_path=str(dest),
    )


SPEC = StageSpec(
    name="quantize",
    version=9,  # 9: speed vs FP32 timed in ABBA rounds (interval, stable, contended: accuracy.json schema 3); 8: a decoder quantized dynamically, gated on its generations (gate.decoder); 7: accuracy.json says what its held-out inputs were; 6: a versioned record; 5: a directory
    params=QuantizeParams,
    inputs=("onnx",),
    outputs=(
        Artifact("onnx_int8", ArtifactKind.TREE, entry=MODEL_FILE),
        Artifact("accuracy_int8", filename="accuracy.json"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnx", "onnxruntime", "numpy", "pillow", "tokenizers"),
    identity=lambda p: p.data_identity(),
    check=check,
    description="INT8 ONNX (static Q/DQ or dynamic; onnxruntime.quantization or ModelOpt), accuracy-gated "
    "against FP32, with automatic FP32 fallback of the most sensitive nodes",
)
