"""The thresholds stages accept: parity (every transforming stage) and the accuracy gate
for reduced precision. Pydantic only, no numpy: stage modules import this at discovery."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from deploy.domain.issues import Issue
from deploy.spec.tensors import OutputKind, OutputSpec


class Tolerance(BaseModel):
    """Pass when |actual - ref| <= atol + rtol * |ref| everywhere and cosine >= min_cosine."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    atol: float | None = Field(
        1e-4,
        ge=0,
        description="Absolute tolerance: pass where `|actual - ref| <= atol + rtol * |ref|`; null: no "
        "elementwise check, the cosine alone gates (reduced precisions, whose errors grow with the outputs' scale).",
    )
    rtol: float = Field(1e-3, ge=0, description="Relative tolerance (see atol).")
    min_cosine: float = Field(
        0.9999, ge=-1, le=1, description="Least cosine similarity between actual and reference outputs."
    )


class AccuracyGate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    min_cosine: float = Field(
        0.99,
        ge=-1,
        le=1,
        description="Least cosine similarity to the FP32 model's outputs on the held-out inputs.",
    )
    max_abs: float | None = Field(
        None, ge=0, description="Largest absolute difference allowed; null: not checked."
    )
    # For outputs shaped [batch, classes]: fraction of samples whose top-1 class agrees.
    min_top1_agreement: float | None = Field(
        None,
        ge=0,
        le=1,
        description="For [batch, classes] outputs: least fraction of samples whose top-1 class matches FP32's; null: not checked.",
    )
    top_k: int = Field(5, ge=1, description="k of min_topk_agreement.")
    min_topk_agreement: float | None = Field(
        None,
        ge=0,
        le=1,
        description="For [batch, classes] outputs: least fraction of samples whose FP32 top-1 class is in the top_k; null: not checked.",
    )


def gate_issues(gate: AccuracyGate, outputs: tuple[OutputSpec, ...], where: str) -> list[Issue]:
    """Agreement gates need class scores: without an output declared `kind: logits` they
    would silently judge nothing (or judge an embedding as if it were classes)."""
    asked = [name for name in ("min_top1_agreement", "min_topk_agreement") if getattr(gate, name) is not None]
    if not asked or any(spec.kind is OutputKind.LOGITS for spec in outputs):
        return []
    return [
        Issue(f"{where}.gate.{name}", "needs an output declared `kind: logits` (class scores) under outputs")
        for name in asked
    ]


class AutoFallback(BaseModel):
    """Shared by the reduced-precision stages: when the gate fails, keep the nodes that
    hurt accuracy most in FP32 until it passes (gates/fallback.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    auto: bool = Field(
        False,
        description="When the accuracy gate fails, rank nodes by the error each adds on the calibration inputs and "
        "keep the fewest most sensitive ones in FP32 that make the gate pass (up to max_float_nodes).",
    )
    max_float_nodes: int = Field(
        16, ge=1, description="auto: at most this many nodes kept in FP32 before the stage gives up."
    )
