"""The parity thresholds every transforming stage accepts (pydantic only, no numpy:
stage modules import this at discovery time)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Tolerance(BaseModel):
    """Pass when |actual - ref| <= atol + rtol * |ref| everywhere and cosine >= min_cosine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    atol: float = Field(1e-4, ge=0)
    rtol: float = Field(1e-3, ge=0)
    min_cosine: float = Field(0.9999, ge=-1, le=1)
