"""quantize: post-training INT8 as an explicit Q/DQ ONNX (onnxruntime.quantization), gated
on accuracy against the FP32 model on held-out inputs.

The settings follow the target. TensorRT (explicit quantization, strongly typed builds):
symmetric int8 activations and weights, per-channel weights. ONNX Runtime on CPU: uint8
activations, which its kernels fuse completely; with symmetric int8 activations ORT
keeps many convolutions in float and the model is *slower* than FP32 (measured on
resnet50: 32 ms vs 27 ms FP32 vs 9.5 ms uint8 at batch 1 on 2 cores).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.config import DeployConfig
from pipeline.errors import Issue, MissingDependency, StageFailed
from pipeline.stage import Artifact, Section, StageContext, StageSpec
from stages._datasource import DataSource, fingerprint
from stages._tolerance import AccuracyGate, gate_issues

Target = Literal["onnxruntime", "tensorrt"]
Method = Literal["minmax", "entropy", "percentile"]


class QuantizeParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    target: Target = Field(
        "onnxruntime",
        description="Who runs the INT8 model: onnxruntime (uint8 activations) or tensorrt (symmetric int8 Q/DQ).",
    )
    # onnxruntime.quantization, or NVIDIA ModelOpt's ONNX PTQ (Q/DQ "following TensorRT
    # rules"; only for target tensorrt; needs nvidia-modelopt[onnx], whose pins conflict
    # with this project's onnx / onnxruntime: never run here).
    quantizer: Literal["onnxruntime", "modelopt"] = Field(
        "onnxruntime",
        description="onnxruntime.quantization, or NVIDIA ModelOpt's ONNX PTQ (target tensorrt only; "
        "needs nvidia-modelopt[onnx]; unverified).",
    )
    method: Method = Field("minmax", description="Calibration method: how activation ranges are chosen.")
    per_channel: bool = Field(True, description="Per-channel weight scales (else per-tensor).")
    # ORT's quant_pre_process (shape inference + graph optimisation) before quantizing.
    preprocess: bool = Field(
        True, description="Run ONNX Runtime's quant_pre_process (shape inference + graph optimisation) first."
    )
    calibration: DataSource = Field(
        DataSource(),
        description="Calibration inputs; use real data (images / arrays) for a meaningful INT8 model.",
    )
    # Held-out inputs for the gate; default: the `holdout_count` samples that follow the
    # calibration samples in the same source.
    holdout: DataSource | None = Field(
        None,
        description="Held-out inputs for the accuracy gate; null: the holdout_count samples that follow the "
        "calibration ones in the same source.",
    )
    holdout_count: int = Field(32, ge=1, description="Held-out samples taken when holdout is null.")
    gate: AccuracyGate = Field(AccuracyGate(), description="INT8 vs FP32 outputs on the held-out inputs.")


def check(params: QuantizeParams, config: DeployConfig) -> list[Issue]:
    where = "stages.quantize"
    issues = gate_issues(params.gate, config.outputs, where)
    if params.quantizer != "modelopt":
        return issues
    if params.target != "tensorrt":
        issues.append(Issue(f"{where}.quantizer", "modelopt writes Q/DQ for TensorRT: set target: tensorrt"))
    if params.method == "percentile":
        issues.append(Issue(f"{where}.method", "modelopt calibrates with minmax ('max') or entropy only"))
    return issues


def holdout_source(params: QuantizeParams) -> DataSource:
    if params.holdout is not None:
        return params.holdout
    calibration = params.calibration
    return calibration.model_copy(
        update={"offset": calibration.offset + calibration.count, "count": params.holdout_count}
    )


def run(ctx: StageContext, params: QuantizeParams) -> None:
    from stages import _accuracy, _datasource

    calibration = _datasource.load(params.calibration, ctx.config)
    holdout = _datasource.load(holdout_source(params), ctx.config)
    if params.quantizer == "modelopt":
        _quantize_modelopt(ctx.input("onnx"), ctx.output("onnx_int8"), calibration, params)
    else:
        _quantize(ctx.input("onnx"), ctx.output("onnx_int8"), calibration, params, ctx.workdir)
    details = {"target": params.target, "method": params.method, "calibration_samples": len(calibration)}
    _accuracy.conclude(ctx, "INT8", ctx.output("onnx_int8"), holdout, params.gate, details)


def _quantize(source: Path, dest: Path, calibration: list[Any], params: QuantizeParams, work: Path) -> None:
    from onnxruntime import quantization as q

    model = source
    if params.preprocess:
        model = work / "preprocessed.onnx"
        q.shape_inference.quant_pre_process(str(source), str(model), skip_symbolic_shape=True)
    tensorrt = params.target == "tensorrt"
    q.quantize_static(
        str(model),
        str(dest),
        None,
        quant_format=q.QuantFormat.QDQ,
        per_channel=params.per_channel,
        activation_type=q.QuantType.QInt8 if tensorrt else q.QuantType.QUInt8,
        weight_type=q.QuantType.QInt8,
        calibrate_method=_ort_method(params.method),
        extra_options={"ActivationSymmetric": tensorrt, "WeightSymmetric": True},
        calibration_cache_path=str(_calibrate(model, calibration, params.method, work)),
    )


# onnxruntime's CalibrationMethod member per method (looked up late: no import at discovery).
_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def _ort_method(method: Method) -> Any:
    from onnxruntime.quantization import CalibrationMethod

    return getattr(CalibrationMethod, _METHODS[method])


def _calibrate(model: Path, calibration: list[Any], method: Method, work: Path) -> Path:
    """Calibrates the way quantize_static would, but checks the ranges first: a -inf / inf
    constant (a transformer's attention-mask fill) makes them infinite, which minmax turns
    into NaN zero-points and entropy / percentile into numpy errors. The ranges reach
    quantize_static through its calibration cache, so calibration runs once."""
    from onnxruntime.quantization.calibrate import save_tensors_data

    try:
        ranges = _ranges(model, calibration, method, work)
    except ValueError:
        # numpy refuses a histogram over an infinite range: minmax finds and names those
        # tensors. Any other ValueError is ORT's own: minmax ranges must not stand in for it.
        _refuse_infinite(_ranges(model, calibration, "minmax", work), model)
        raise
    _refuse_infinite(ranges, model)
    path = work / "calibration.json"
    save_tensors_data(ranges, path)
    return path


def _ranges(model: Path, calibration: list[Any], method: Method, work: Path) -> Any:
    from onnxruntime.quantization.calibrate import create_calibrator
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    # The op types quantize_static calibrates when it is given none.
    op_types = sorted(set(QDQRegistry) | set(QLinearOpsRegistry))
    calibrator = create_calibrator(
        model,
        op_types,
        augmented_model_path=str(work / "augmented.onnx"),
        calibrate_method=_ort_method(method),
    )
    calibrator.collect_data(_reader(calibration))
    return calibrator.compute_data()


def _refuse_infinite(ranges: Any, model: Path) -> None:
    import numpy as np

    bad = [name for name, r in ranges.data.items() if not np.all(np.isfinite(r.range_value))]
    if not bad:
        return
    producers = _producers(model)
    shown = ", ".join(_describe(name, ranges.data[name], producers) for name in bad[:5])
    shown += f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    # A large finite fill (torch.finfo.min, -1e4) is no way out: it gets past this check but
    # rounds the tensor's real values to one INT8 step, and the accuracy gate fails instead.
    raise StageFailed(
        f"INT8 calibration ranges are not finite for {len(bad)} tensor(s): {shown}. Static INT8 needs a "
        "finite range per activation, so a tensor holding -inf / inf (e.g. an attention-mask fill) cannot "
        "be quantized, and a large finite fill only trades this error for an accuracy-gate failure. Keep "
        "the nodes that produce and read these tensors in float (the quantize stage has no option to "
        "exclude nodes yet), or use another recipe for this model: the fp16 stage instead of quantize."
    )


def _describe(name: str, data: Any, producers: dict[str, str]) -> str:
    import numpy as np

    low, high = float(np.min(data.range_value[0])), float(np.max(data.range_value[1]))
    return f"{name} [{low:g}, {high:g}] ({producers.get(name, 'a graph input')})"


def _producers(model: Path) -> dict[str, str]:
    """Tensor name -> the node writing it: node names are what an exclusion list takes."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return {
        out: f"from {node.op_type} node {node.name or '(unnamed)'}"
        for node in graph.node
        for out in node.output
    }


def _quantize_modelopt(source: Path, dest: Path, calibration: list[Any], params: QuantizeParams) -> None:
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


def _reader(samples: list[Any]) -> Any:
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.feeds = iter(samples)

        def get_next(self) -> Any:
            return next(self.feeds, None)

    return Reader()


SPEC = StageSpec(
    name="quantize",
    version=3,
    params=QuantizeParams,
    inputs=("onnx",),
    outputs=(
        Artifact("onnx_int8", filename="model.int8.onnx"),
        Artifact("accuracy", filename="accuracy.json"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnx", "onnxruntime", "numpy", "pillow"),
    identity=lambda p: {
        "calibration_data": fingerprint(p.calibration),
        "holdout_data": fingerprint(p.holdout),
    },
    check=check,
    description="INT8 Q/DQ ONNX (onnxruntime.quantization or ModelOpt), accuracy-gated against FP32",
)
