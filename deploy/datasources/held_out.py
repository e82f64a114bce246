"""The parameters the reduced-precision AOTInductor stages share (inductor_fp16 and
inductor_bf16): the held-out inputs their accuracy gate judges, the gate, and whether a
precision the device only emulates is built anyway; and those inputs loaded with what
they are (real or random). One definition, so both stages are judged the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from deploy.datasources.datasource import DataSource
from deploy.gates.tolerance import AccuracyGate
from deploy.spec.config import DeployConfig

if TYPE_CHECKING:
    import numpy as np

    from deploy.gates.accuracy_report import Evidence


class ReducedPackageParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    holdout: DataSource = Field(DataSource(count=16), description="Inputs for the accuracy gate.")
    gate: AccuracyGate = Field(
        AccuracyGate(min_cosine=0.999), description="The package's outputs vs FP32's on the holdout inputs."
    )
    emulated: bool = Field(
        False,
        description="Build and gate the package where the device has no such arithmetic (torch emulates it: "
        "correct, slower than FP32), to check its accuracy before deploying to one that has it; false: "
        "the stage is skipped there, saying why.",
    )


def load(
    params: ReducedPackageParams, config: DeployConfig, stage: str
) -> tuple[list[dict[str, np.ndarray]], Evidence]:
    """The held-out inputs, and what they are (random ones are said to be)."""
    from deploy.datasources import datasource

    return datasource.load(params.holdout, config), datasource.evidence(
        params.holdout, f"stages.{stage}.holdout"
    )
