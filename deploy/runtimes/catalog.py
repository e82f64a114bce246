"""The runtimes the bench stage times, one registry: each name, the artifact it loads and
what it deploys (format, precision, the Triton model formats serving it). Read by the
bench stage, the select stage and `deploy bench`; nothing else spells these names."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from deploy.domain.vocabulary import Precision, Runtime, ServingFormat
from deploy.pipeline.contract import SOURCE_ARTIFACT


class Family(StrEnum):
    """What a deployment of a runtime is, whatever its precision."""

    PYTORCH = "pytorch"
    TORCHSCRIPT = "torchscript"
    ONNX = "onnx"
    OPENVINO = "openvino"
    TENSORRT = "tensorrt"
    INDUCTOR = "inductor"  # an AOTInductor package
    TRITON = "triton"


@dataclass(frozen=True)
class Deploys:
    artifact: str  # the pipeline artifact the runtime loads
    family: Family
    precision: Precision | None  # None: the served model's own (a Triton row)
    served_as: tuple[ServingFormat, ...] = ()  # Triton model formats (serving/layout.py) that serve it
    accuracy: str | None = None  # the artifact of its accuracy report against FP32, if any


ONNX_FORMATS = (ServingFormat.ONNX, ServingFormat.PYTHON)
OPENVINO_FORMATS = (ServingFormat.OPENVINO, ServingFormat.PYTHON_OPENVINO)
INDUCTOR_FORMATS = (ServingFormat.PYTHON_INDUCTOR,)

CATALOG: dict[Runtime, Deploys] = {
    Runtime.EAGER: Deploys(SOURCE_ARTIFACT, Family.PYTORCH, Precision.FP32),
    Runtime.TORCHSCRIPT: Deploys(
        "torchscript", Family.TORCHSCRIPT, Precision.FP32, (ServingFormat.TORCHSCRIPT,)
    ),
    Runtime.ONNXRUNTIME: Deploys("onnx", Family.ONNX, Precision.FP32, ONNX_FORMATS),
    Runtime.ONNXRUNTIME_INT8: Deploys(
        "onnx_int8", Family.ONNX, Precision.INT8, ONNX_FORMATS, "accuracy_int8"
    ),
    Runtime.ONNXRUNTIME_FP16: Deploys(
        "onnx_fp16", Family.ONNX, Precision.FP16, ONNX_FORMATS, "accuracy_fp16"
    ),
    # Served by Triton's openvino backend, or by OpenVINO in the python backend.
    Runtime.OPENVINO: Deploys("openvino", Family.OPENVINO, Precision.FP32, OPENVINO_FORMATS),
    Runtime.OPENVINO_INT8: Deploys(
        "openvino_int8", Family.OPENVINO, Precision.INT8, OPENVINO_FORMATS, "accuracy_openvino_int8"
    ),
    # The FP32 IR computed in bf16 (the CPU plugin's default where the CPU has bf16).
    Runtime.OPENVINO_BF16: Deploys(
        "openvino", Family.OPENVINO, Precision.BF16, OPENVINO_FORMATS, "accuracy_openvino_bf16"
    ),
    # In process only: the IR with FP16 weights (computed in FP32 on a CPU).
    Runtime.OPENVINO_FP16: Deploys(
        "openvino_fp16", Family.OPENVINO, Precision.FP16, accuracy="accuracy_openvino_fp16"
    ),
    Runtime.TENSORRT: Deploys("engine", Family.TENSORRT, Precision.MIXED, (ServingFormat.PLAN,)),
    # The compiled PyTorch path: served by the AOTInductor package inside the python backend.
    Runtime.INDUCTOR: Deploys("inductor", Family.INDUCTOR, Precision.FP32, INDUCTOR_FORMATS),
    Runtime.INDUCTOR_FP16: Deploys(
        "inductor_fp16", Family.INDUCTOR, Precision.FP16, INDUCTOR_FORMATS, "accuracy_inductor_fp16"
    ),
    Runtime.INDUCTOR_BF16: Deploys(
        "inductor_bf16", Family.INDUCTOR, Precision.BF16, INDUCTOR_FORMATS, "accuracy_inductor_bf16"
    ),
    Runtime.TRITON: Deploys("repository", Family.TRITON, None),
}

# The runtimes that run in the bench stage's own process (the candidates `select` weighs).
IN_PROCESS = tuple(r for r in Runtime if r is not Runtime.TRITON)


def artifact_of(runtime: str) -> str:
    return CATALOG[Runtime(runtime)].artifact


def serving(fmt: str, precision: str) -> Runtime | None:
    """The runtime whose artifact a Triton model of `fmt` at `precision` serves (None: deploy
    serves no such model). The one table: triton_config writes models by it, select maps
    served models back to in-process rows by it."""
    found = [r for r, d in CATALOG.items() if fmt in d.served_as]
    exact = next((r for r in found if CATALOG[r].precision == precision), None)
    if exact is None and precision == Precision.FP32 and len(found) == 1:
        return found[0]  # a TensorRT engine: one file, named as FP32 whatever its layers run in
    return exact


# The accuracy reports select reads: one per reduced precision a stage gates.
ACCURACY_REPORTS = tuple(dict.fromkeys(d.accuracy for d in CATALOG.values() if d.accuracy))
