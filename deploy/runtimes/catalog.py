"""The runtimes the bench stage times, one registry: each name, the artifact it loads and
what it deploys (format, precision, the Triton model formats serving it). Read by the
bench stage, the select stage and `deploy bench`; nothing else spells these names."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from deploy.pipeline.contract import SOURCE_ARTIFACT


class BenchRuntime(StrEnum):
    EAGER = "eager"
    TORCHSCRIPT = "torchscript"
    ONNXRUNTIME = "onnxruntime"
    ONNXRUNTIME_INT8 = "onnxruntime_int8"
    ONNXRUNTIME_FP16 = "onnxruntime_fp16"
    OPENVINO = "openvino"
    OPENVINO_FP16 = "openvino_fp16"
    OPENVINO_BF16 = "openvino_bf16"
    OPENVINO_INT8 = "openvino_int8"
    TENSORRT = "tensorrt"
    TRITON = "triton"


@dataclass(frozen=True)
class Deploys:
    artifact: str  # the pipeline artifact the runtime loads
    format: str  # what a deployment of it is: pytorch, torchscript, onnx, tensorrt
    precision: str  # fp32, int8, fp16, or `engine` (TensorRT chose per layer)
    served_as: tuple[str, ...] = ()  # Triton model formats (serving/layout.py) that serve it
    accuracy: str | None = None  # the artifact of its accuracy report against FP32, if any


OPENVINO_FORMATS = ("openvino", "python_openvino")

CATALOG: dict[BenchRuntime, Deploys] = {
    BenchRuntime.EAGER: Deploys(SOURCE_ARTIFACT, "pytorch", "fp32"),
    BenchRuntime.TORCHSCRIPT: Deploys("torchscript", "torchscript", "fp32", ("torchscript",)),
    BenchRuntime.ONNXRUNTIME: Deploys("onnx", "onnx", "fp32", ("onnx", "python")),
    BenchRuntime.ONNXRUNTIME_INT8: Deploys("onnx_int8", "onnx", "int8", ("onnx", "python"), "accuracy_int8"),
    BenchRuntime.ONNXRUNTIME_FP16: Deploys("onnx_fp16", "onnx", "fp16", ("onnx", "python"), "accuracy_fp16"),
    # Served by Triton's openvino backend, or by OpenVINO in the python backend.
    BenchRuntime.OPENVINO: Deploys("openvino", "openvino", "fp32", OPENVINO_FORMATS),
    BenchRuntime.OPENVINO_INT8: Deploys(
        "openvino_int8", "openvino", "int8", OPENVINO_FORMATS, "accuracy_openvino_int8"
    ),
    # The FP32 IR computed in bf16 (the CPU plugin's default where the CPU has bf16).
    BenchRuntime.OPENVINO_BF16: Deploys(
        "openvino", "openvino", "bf16", OPENVINO_FORMATS, "accuracy_openvino_bf16"
    ),
    # In process only: the IR with FP16 weights.
    BenchRuntime.OPENVINO_FP16: Deploys(
        "openvino_fp16", "openvino", "fp16 weights", accuracy="accuracy_openvino_fp16"
    ),
    BenchRuntime.TENSORRT: Deploys("engine", "tensorrt", "engine", ("plan",)),
    BenchRuntime.TRITON: Deploys("repository", "triton", "as served"),
}

# The runtimes that run in the bench stage's own process (the candidates `select` weighs).
IN_PROCESS = tuple(r for r in BenchRuntime if r is not BenchRuntime.TRITON)


def artifact_of(runtime: str) -> str:
    return CATALOG[BenchRuntime(runtime)].artifact


# The accuracy reports select reads: one per reduced precision a stage gates.
ACCURACY_REPORTS = tuple(dict.fromkeys(d.accuracy for d in CATALOG.values() if d.accuracy))
