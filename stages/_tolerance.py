"""The thresholds stages accept: parity (every transforming stage) and the accuracy gate
for reduced precision. Pydantic only, no numpy: stage modules import this at discovery."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Tolerance(BaseModel):
    """Pass when |actual - ref| <= atol + rtol * |ref| everywhere and cosine >= min_cosine."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    atol: float = Field(1e-4, ge=0)
    rtol: float = Field(1e-3, ge=0)
    min_cosine: float = Field(0.9999, ge=-1, le=1)


class AccuracyGate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    min_cosine: float = Field(0.99, ge=-1, le=1)
    max_abs: float | None = Field(None, ge=0)
    # For outputs shaped [batch, classes]: fraction of samples whose top-1 class agrees.
    min_top1_agreement: float | None = Field(None, ge=0, le=1)
    top_k: int = Field(5, ge=1)
    min_topk_agreement: float | None = Field(None, ge=0, le=1)
