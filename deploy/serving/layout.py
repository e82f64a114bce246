"""The repository layout: one entry per serving format says how Triton runs it and which
file holds the model. The triton_config stage writes repositories with it; the smoke and
bench stages and `deploy serve` read them back with it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.domain.vocabulary import ServingFormat
from deploy.runtimes.dtypes import DTYPES

if TYPE_CHECKING:
    import numpy as np

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


# The config.pbtxt parameter listing the tensors that are 0-d for the model in a model
# without a batch dim: Triton has no 0-d tensors, so they travel as [1] and the python
# backend's model.py gives the model its scalar (and returns a 0-d output as [1]).
SCALARS_PARAMETER = "deploy_scalars"


def wire_dims(dims: list[int], batched: bool) -> tuple[list[int], bool]:
    """A tensor's dims in config.pbtxt (batch dim left out) and whether Triton reshapes
    them for the model. Triton refuses empty dims: a per-sample scalar of a batched model
    is `dims: [1]` with `reshape: { shape: [] }` (the model gets [batch], clients send
    [batch, 1]); a 0-d tensor of a model without batching travels as [1]."""
    if dims:
        return dims, False
    return [1], batched


def to_wire(array: np.ndarray, scalar: bool) -> np.ndarray:
    """What a client sends for a tensor that is 0-d per sample: one more axis of 1."""
    return array.reshape(*array.shape, 1) if scalar else array


def from_wire(array: np.ndarray, scalar: bool) -> np.ndarray:
    """What a client makes of an answer that is 0-d per sample: the trailing 1 dropped."""
    return array.reshape(array.shape[:-1]) if scalar and array.ndim and array.shape[-1] == 1 else array


def io_name(fmt: str, name: str, index: int) -> str:
    # The libtorch backend maps tensors by the `<name>__<index>` convention.
    return f"{name}__{index}" if fmt == ServingFormat.TORCHSCRIPT else name


def skip_reason(backend: str) -> str:
    """Why a model is not loaded on a server without its backend."""
    return f"the server has no '{backend}' backend"
