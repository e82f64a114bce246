"""The domain's words as types. StrEnums: YAML and JSON keep the plain strings
(`precision: fp32`), a member equals its string, and a typo is an error at the point it
is written, not a silent mismatch at the point it is compared."""

from __future__ import annotations

from enum import StrEnum


class Precision(StrEnum):
    """The number format a model computes in."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    MIXED = "mixed"  # a TensorRT engine: the builder chose per layer

    @property
    def reduced(self) -> bool:
        """Judged against FP32 by an accuracy gate before it may be deployed."""
        return self is not Precision.FP32


class ServingFormat(StrEnum):
    """How a Triton model dir holds the model (serving/layout.py says what each needs)."""

    ONNX = "onnx"
    TORCHSCRIPT = "torchscript"
    PYTHON = "python"  # ONNX Runtime inside Triton's python backend
    OPENVINO = "openvino"
    PYTHON_OPENVINO = "python_openvino"  # OpenVINO inside Triton's python backend
    PLAN = "plan"  # a TensorRT engine
    PYTHON_INDUCTOR = "python_inductor"  # an AOTInductor package inside Triton's python backend


class Metric(StrEnum):
    """What select and the Triton config search optimise."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"


class GenerationMetric(StrEnum):
    """What select optimises for a decoder's generate models (bench's generation rows)."""

    TTFT = "ttft"  # time to first token, median ms
    TOKENS_PER_S = "tokens_per_s"  # generated over every sequence in flight


# Metrics whose best value is the smallest; the rest are rates.
LOWER_IS_BETTER = frozenset({Metric.LATENCY, GenerationMetric.TTFT})
UNITS = {
    Metric.LATENCY: "ms",
    Metric.THROUGHPUT: "items/s",
    GenerationMetric.TTFT: "ms",
    GenerationMetric.TOKENS_PER_S: "tokens/s",
}


class Protocol(StrEnum):
    HTTP = "http"
    GRPC = "grpc"


class DataKind(StrEnum):
    """Where calibration, hold-out and smoke data come from."""

    RANDOM = "random"
    IMAGES = "images"
    ARRAYS = "arrays"
    TEXT = "text"


class Layout(StrEnum):
    NCHW = "NCHW"
    NHWC = "NHWC"


class ModelSuffix(StrEnum):
    """A model file's suffix, which says what reads it."""

    ONNX = ".onnx"
    IR = ".xml"  # an OpenVINO IR: its weights in the .bin beside it
    TORCHSCRIPT = ".pt"
    PT2 = ".pt2"  # an AOTInductor package


# A live server's HTTP endpoint (release's `servers`, rollback's --server): scheme, host and
# port, no path (deploy appends Triton's /v2/...).
SERVER_URL = r"^https?://[^\s/]+/?$"
