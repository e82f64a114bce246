"""The quantize stage's parameters and the words they are made of; its helpers import
them from here (stage.py holds the spec and the run)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from deploy.datasources.calibrated import Calibrated
from deploy.stages.quantize.calibration import Method


class Int8Target(StrEnum):
    """Who runs the INT8 model."""

    ONNXRUNTIME = "onnxruntime"  # uint8 activations
    TENSORRT = "tensorrt"  # symmetric int8 Q/DQ


class Recipe(StrEnum):
    STATIC = "static"  # Q/DQ with calibrated activation ranges
    DYNAMIC = "dynamic"  # int8 weights, activations quantized at run time


class Quantizer(StrEnum):
    ONNXRUNTIME = "onnxruntime"
    MODELOPT = "modelopt"  # NVIDIA ModelOpt's ONNX PTQ (target tensorrt only)


class QuantizeParams(Calibrated):
    target: Int8Target = Field(
        Int8Target.ONNXRUNTIME,
        description="Who runs the INT8 model: onnxruntime (uint8 activations) or tensorrt (symmetric int8 Q/DQ).",
    )
    recipe: Recipe = Field(
        Recipe.STATIC,
        description="static: Q/DQ with calibrated activation ranges (CNNs; TensorRT); dynamic: int8 weights, "
        "activations quantized at run time (transformers on ONNX Runtime CPU; no calibration ranges).",
    )
    op_types: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        description="ONNX op types to quantize, e.g. [MatMul, Gemm] or [Conv]; null: every type the recipe supports.",
    )
    exclude: tuple[str, ...] = Field(
        (), description="ONNX node names kept in FP32 (names as in the run report's sensitivity table)."
    )
    # onnxruntime.quantization, or NVIDIA ModelOpt's ONNX PTQ (Q/DQ "following TensorRT
    # rules"; only for target tensorrt; needs nvidia-modelopt[onnx], whose pins conflict
    # with this project's onnx / onnxruntime: never run here).
    quantizer: Quantizer = Field(
        Quantizer.ONNXRUNTIME,
        description="onnxruntime.quantization, or NVIDIA ModelOpt's ONNX PTQ (target tensorrt only; "
        "needs nvidia-modelopt[onnx]; unverified).",
    )
    method: Method = Field(Method.MINMAX, description="Calibration method: how activation ranges are chosen.")
    per_channel: bool = Field(True, description="Per-channel weight scales (else per-tensor).")
    # ORT's quant_pre_process (shape inference + graph optimisation) before quantizing.
    preprocess: bool = Field(
        True, description="Run ONNX Runtime's quant_pre_process (shape inference + graph optimisation) first."
    )
