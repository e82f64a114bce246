"""The repository layout: one entry per serving format says how Triton runs it and which
file holds the model. The triton_config stage writes repositories with it; the smoke and
bench stages and `deploy serve` read them back with it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deploy.domain.vocabulary import ServingFormat
from deploy.runtimes.dtypes import DTYPES

# The python backend's model.py, copied next to the model file (model.onnx: ONNX Runtime;
# model.xml: OpenVINO; model.pt2: AOTInductor).
PYTHON_MODEL = Path(__file__).with_name("python_model.py")


@dataclass(frozen=True)
class FormatLayout:
    fmt: ServingFormat
    platform: str  # config.pbtxt `platform`, or its `backend` where the two are the same name
    backend: str  # the backend directory the server needs
    model_file: str  # `<version>/<model_file>`
    artifact: str  # the pipeline artifact served (onnx, torchscript, engine, openvino)
    python_model: Path | None = None  # the model.py beside it (the python backend's formats)

    @property
    def by_backend(self) -> bool:
        """Named by `backend:` in config.pbtxt (python, openvino), not `platform:`."""
        return self.platform == self.backend


LAYOUTS: dict[ServingFormat, FormatLayout] = {
    layout.fmt: layout
    for layout in (
        FormatLayout(ServingFormat.ONNX, "onnxruntime_onnx", "onnxruntime", "model.onnx", "onnx"),
        FormatLayout(ServingFormat.TORCHSCRIPT, "pytorch_libtorch", "pytorch", "model.pt", "torchscript"),
        # ONNX Runtime inside the python backend: the CPU format any tritonserver can load.
        FormatLayout(ServingFormat.PYTHON, "python", "python", "model.onnx", "onnx", PYTHON_MODEL),
        # Triton's OpenVINO backend: model.xml with model.bin beside it.
        FormatLayout(ServingFormat.OPENVINO, "openvino", "openvino", "model.xml", "openvino"),
        # OpenVINO inside the python backend, for servers without the openvino backend.
        FormatLayout(
            ServingFormat.PYTHON_OPENVINO, "python", "python", "model.xml", "openvino", PYTHON_MODEL
        ),
        FormatLayout(ServingFormat.PLAN, "tensorrt_plan", "tensorrt", "model.plan", "engine"),
        # An AOTInductor package run by torch inside the python backend (any tritonserver).
        FormatLayout(
            ServingFormat.PYTHON_INDUCTOR, "python", "python", "model.pt2", "inductor", PYTHON_MODEL
        ),
    )
}
# config.pbtxt's platform / backend -> its format; the python backend's formats are told
# apart by FORMAT_PARAMETER.
BY_PLATFORM = {
    layout.platform: layout
    for layout in LAYOUTS.values()
    if layout.fmt not in (ServingFormat.PYTHON_OPENVINO, ServingFormat.PYTHON_INDUCTOR)
}
# The config.pbtxt parameter naming the format a model was written as (the typed record
# of it that travels inside the config: read back by `repository.models`).
FORMAT_PARAMETER = "deploy_format"

# config.pbtxt's data_type for each of our dtypes (runtimes.dtypes is the one table).
TRITON_TYPES = {name: f"TYPE_{d.triton}" for name, d in DTYPES.items()}


def io_name(fmt: str, name: str, index: int) -> str:
    # The libtorch backend maps tensors by the `<name>__<index>` convention.
    return f"{name}__{index}" if fmt == ServingFormat.TORCHSCRIPT else name


def skip_reason(backend: str) -> str:
    """Why a model is not loaded on a server without its backend."""
    return f"the server has no '{backend}' backend"
