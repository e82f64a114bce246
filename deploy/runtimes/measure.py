"""How long and how carefully a stage measures (the bench stage, the Triton config
search): trtexec's warm-up / duration / iterations and perf_analyzer's stability rule, as
one params model. Pydantic only: stage modules import it at discovery."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field, model_validator

from deploy.spec.tensors import Frozen

if TYPE_CHECKING:
    from deploy.runtimes.harness import Settings


class MeasureSettings(Frozen):
    warmup_ms: float = Field(200, ge=0, description="Untimed warm-up per cell, ms (trtexec --warmUp).")
    duration_s: float = Field(
        3.0, ge=0, description="Measure at least this long per cell, seconds (trtexec --duration) ..."
    )
    iterations: int = Field(10, ge=1, description="... and at least this many calls (trtexec --iterations).")
    percentiles: tuple[Annotated[float, Field(gt=0, le=100)], ...] = Field(
        (90.0, 95.0, 99.0),
        min_length=1,
        description="Latency percentiles to report; the highest is the gate's latency.",
    )
    stability_windows: int = Field(
        3, ge=1, description="K: stop once the last K windows agree (perf_analyzer's default 3)"
    )
    stability_threshold: float = Field(
        0.10,
        gt=0,
        lt=1,
        description="each of the K windows' throughput and median latency within ± this fraction of their mean (--stability-percentage)",
    )
    max_windows: int = Field(
        10,
        ge=1,
        description="windows to try before giving up and marking the cell unstable (perf_analyzer's --max-trials)",
    )

    @model_validator(mode="after")
    def _enough_windows(self) -> MeasureSettings:
        if self.max_windows < self.stability_windows:
            raise ValueError(
                f"max_windows ({self.max_windows}) must be >= stability_windows ({self.stability_windows})"
            )
        return self

    def settings(self) -> Settings:
        from deploy.runtimes.harness import Settings

        return Settings(
            warmup_ms=self.warmup_ms,
            duration_s=self.duration_s,
            iterations=self.iterations,
            percentiles=self.percentiles,
            stability_windows=self.stability_windows,
            stability_threshold=self.stability_threshold,
            max_windows=self.max_windows,
        )
