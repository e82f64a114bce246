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


# torch.onnx's converter (torchlib) writes opset 18 on torch 2.14 (TORCHLIB_OPSET) and
# converts down where asked: at 17 that leaves Split with num_outputs and ReduceMean with
# noop_with_empty_axes, which no opset-17 checker or runtime accepts (docs/how-to/model-zoo.md).
DYNAMO_OPSET = 18
LEGACY_OPSET = 17


class ExportParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    opset: int | None = Field(
        None,
        ge=13,
        le=23,
        description="ONNX opset version; null: each exporter's own (torch.export: 18, the opset its converter writes, "
        "whose graphs are valid there and not always below: Split's num_outputs, ReduceMean's axes; the legacy "
        "exporter: 17).",
    )

    def opset_for(self, exporter: Exporter) -> int:
        """The opset this exporter writes at: the one asked for, else its own."""
        if self.opset is not None:
            return self.opset
        return DYNAMO_OPSET if exporter is Exporter.DYNAMO else LEGACY_OPSET

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
    accept_frozen: tuple[str, ...] = Field(
        (),
        description="Lines of your own code where the legacy exporter may freeze a value of the data into the graph "
        "(its TracerWarning: a Python `if` on a tensor, an `int()` of a size), as `file.py:LINE` or `file.py` for "
        "every line of it; anywhere else in your code that is an error naming the line. Library code's are recorded.",
    )
