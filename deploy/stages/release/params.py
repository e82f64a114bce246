"""The release stage's params: how many versions to keep, and the gate."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from deploy.datasources.datasource import DataSource
from deploy.domain.vocabulary import SERVER_URL
from deploy.spec.tensors import Frozen


class ReleaseGate(Frozen):
    min_cosine: float = Field(
        0.999,
        ge=-1,
        le=1,
        description="Least cosine of any output sample to the deployed version's, same inputs.",
    )
    min_top1: float = Field(
        0.99,
        ge=0,
        le=1,
        description="Least share of samples whose argmax agrees with the deployed version (2-D outputs).",
    )
    max_scale_change: float = Field(
        0.05,
        ge=0,
        allow_inf_nan=False,
        description="Most any output sample's size (L2 norm) may move against the deployed version's, same "
        "inputs, as a fraction either way (0.05: within 1/1.05 and 1.05): cosine and top-1 do not see a "
        "checkpoint answering twice as large.",
    )
    max_slowdown: float = Field(
        1.25,
        ge=1,
        description="Most time per request (batch 1) or per item (largest golden batch), new / deployed, "
        "measured alternating in one process.",
    )


class ReleaseParams(Frozen):
    keep: int = Field(
        3,
        ge=1,
        le=1000,
        description="Good (never rolled back) versions kept per model, besides the served one and the newest "
        "good one before it (where a plain rollback goes).",
    )
    gate: ReleaseGate = Field(
        ReleaseGate(), description="What a new version may change against the deployed one."
    )
    rounds: int = Field(
        8,
        ge=6,
        le=101,
        description="Least alternating timing rounds (deployed, new, new, deployed) behind each ratio; more are "
        "added until the ratio's 95 % interval is within `precision`.",
    )
    precision: float = Field(
        0.03,
        gt=0,
        lt=0.5,
        description="Half-width of a speed ratio's 95 % confidence interval, as a fraction of the ratio, that "
        "ends the timing; an interval still straddling max_slowdown then is inconclusive (nothing published).",
    )
    max_rounds: int = Field(200, ge=6, le=10_000, description="Most timing rounds behind each ratio.")
    max_s: float = Field(45.0, gt=0, description="Most seconds of timing behind each ratio.")
    holdout: DataSource | None = Field(
        None,
        description="Held-out inputs both versions also answer (images, arrays or text, as quantize's holdout); "
        "null: the golden inputs only.",
    )
    servers: tuple[Annotated[str, StringConstraints(pattern=SERVER_URL)], ...] = Field(
        (),
        description="HTTP endpoints of live Triton servers (explicit model control, as `deploy serve` runs them) "
        "serving this repository: each is told to load every released model it has loaded, and the new "
        "version is checked ready (Triton loads it before it unloads the old one).",
    )
    accept_regression: str | None = Field(
        None,
        min_length=1,
        description="Publish what the gate refuses, saying why (kept in the release record); "
        "`deploy run --accept-regression REASON` sets it for one run.",
    )
