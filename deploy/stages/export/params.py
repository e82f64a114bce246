"""The export stage's parameters (its YAML section), apart from its run so that its helpers can
import them."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from deploy.gates.tolerance import Tolerance
from deploy.modelio.onnx_files import ExternalData


class Exporter(str, Enum):
    AUTO = "auto"  # torch.export first, the legacy exporter where it fails
    DYNAMO = "dynamo"  # torch.export based (needs onnxscript)
    TORCHSCRIPT = "torchscript"  # the legacy exporter: TorchScript tracing, deprecated upstream

    @property
    def attempts(self) -> tuple[Exporter, ...]:
        return (Exporter.DYNAMO, Exporter.TORCHSCRIPT) if self is Exporter.AUTO else (self,)

    @property
    def other(self) -> Exporter:
        return Exporter.TORCHSCRIPT if self is Exporter.DYNAMO else Exporter.DYNAMO


class ExportParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    opset: int = Field(17, ge=13, le=23, description="ONNX opset version.")
    exporter: Exporter = Field(
        Exporter.AUTO,
        description="auto: torch.export first, the legacy exporter where it fails (the path taken is reported); "
        "dynamo: torch.export only (needs onnxscript); torchscript: the legacy TorchScript-based exporter only "
        "(deprecated upstream; fast).",
    )
    constant_folding: bool = Field(True, description="Fold constants during export (legacy exporter).")
    external_data: ExternalData = Field(
        ExternalData.AUTO,
        description="Where the weights go: auto keeps them in model.onnx unless they pass 2 GB, then "
        "writes model.onnx.data beside it; always writes them beside it. Later stages keep the layout.",
    )
    tolerance: Tolerance = Field(
        Tolerance(), description="ONNX Runtime vs eager outputs on the golden inputs."
    )
