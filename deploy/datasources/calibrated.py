"""The parameters every post-training INT8 stage shares (quantize with ONNX Runtime,
openvino_int8 with NNCF): the calibration inputs, the held-out inputs the accuracy gate
judges, the gate, and the automatic fallback. One definition, so both stages read the
same data the same way and are judged by the same gate. Pydantic only."""

from __future__ import annotations

from pydantic import Field

from deploy.datasources.datasource import DataSource, fingerprint
from deploy.gates.tolerance import AccuracyGate, AutoFallback


class Calibrated(AutoFallback):
    calibration: DataSource = Field(
        DataSource(),
        description="Calibration inputs (static ranges; the fallback's sensitivity ranking); use real data "
        "(images / arrays) for a meaningful INT8 model.",
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

    def holdout_source(self) -> DataSource:
        if self.holdout is not None:
            return self.holdout
        calibration = self.calibration
        return calibration.model_copy(
            update={"offset": calibration.offset + calibration.count, "count": self.holdout_count}
        )

    def evidence_key(self, stage: str) -> str:
        """Where real held-out data is given: with no holdout of its own, the held-out
        samples follow the calibration ones, so the real data goes there."""
        return f"stages.{stage}.holdout" if self.holdout is not None else f"stages.{stage}.calibration"

    def data_identity(self) -> dict[str, str | None]:
        """The data's part of the stage's cache key."""
        return {
            "calibration_data": fingerprint(self.calibration),
            "holdout_data": fingerprint(self.holdout),
            "decoder_prompts": self.gate.decoder.identity(),
        }
