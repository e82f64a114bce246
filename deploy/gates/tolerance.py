"""The thresholds stages accept: parity (every transforming stage) and the accuracy gate
for reduced precision. Pydantic only, no numpy: stage modules import this at discovery."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from deploy.domain.issues import Issue
from deploy.spec.tensors import OutputKind, OutputSpec


class Tolerance(BaseModel):
    """Pass when |actual - ref| <= atol + rtol * |ref| everywhere and cosine >= min_cosine."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

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


class DecoderGate(BaseModel):
    """A decoder's reduced precision (config `model.decoder`) judged by what it generates:
    on each prompt the FP32 step decodes greedily and the candidate is fed FP32's tokens,
    so every step compares the same context (gates/decoder_gate.py)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

    prompts: Path | None = Field(
        None,
        description="A JSON file of held-out prompts, a list of token-id lists; null: random ids "
        "(the gate then proves mechanics only, and says so).",
    )
    new_tokens: int = Field(
        16, ge=1, description="Decoding steps judged per prompt (the prefill is the first)."
    )
    min_agreement: float = Field(
        0.95, ge=0, le=1, description="Least fraction of steps whose next token (argmax) is FP32's."
    )
    min_step_cosine: float = Field(
        0.99,
        ge=-1,
        le=1,
        description="Least cosine between the candidate's and FP32's logits at any one step.",
    )

    @field_validator("prompts")
    @classmethod
    def _readable(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        from deploy.spec.config import resolve_path

        path = resolve_path(value, info)
        if path is not None:
            read_prompts(path)
        return path

    def identity(self) -> str | None:
        """The prompts' content, for the cache key (the path alone would miss an edit)."""
        from deploy.pipeline.graph.hashing import digest_file

        return digest_file(self.prompts) if self.prompts is not None else None


def read_prompts(path: Path) -> list[list[int]]:
    """A list of non-empty lists of token ids (0 or more), or ValueError naming the file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON file ({e})") from None
    ok = isinstance(data, list) and data and all(isinstance(p, list) and p for p in data)
    if not ok or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for p in data for t in p):
        raise ValueError(
            f"{path}: give a JSON list of prompts, each a non-empty list of token ids (0 or more)"
        )
    return data


class AccuracyGate(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

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
    min_exact_agreement: float = Field(
        0.99,
        ge=0,
        le=1,
        description="For integer and boolean outputs (labels, masks, indices), judged by it in place of the "
        "cosine: least fraction of held-out samples whose every element equals FP32's.",
    )
    top_k: int = Field(5, ge=1, description="k of min_topk_agreement.")
    min_topk_agreement: float | None = Field(
        None,
        ge=0,
        le=1,
        description="For [batch, classes] outputs: least fraction of samples whose FP32 top-1 class is in the top_k; null: not checked.",
    )
    decoder: DecoderGate = Field(
        DecoderGate(),
        description="A decoder's gate (config model.decoder), in place of the thresholds above: next-token "
        "agreement and each step's logits cosine on held-out prompts.",
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


def decoder_issues(auto: bool, decoder: object | None, where: str) -> list[Issue]:
    """The fallback ranks nodes by their error on calibration feeds; a decoder is judged by
    what it generates (gate.decoder), which that search does not know."""
    if decoder is None or not auto:
        return []
    return [
        Issue(
            f"{where}.auto",
            "a decoder is gated on its generations, not searched node by node: set auto: false",
        )
    ]


class AutoFallback(BaseModel):
    """Shared by the reduced-precision stages: when the gate fails, keep the nodes that
    hurt accuracy most in FP32 until it passes (gates/fallback.py)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

    auto: bool = Field(
        False,
        description="When the accuracy gate fails, rank nodes by the error each adds on the calibration inputs and "
        "keep the fewest most sensitive ones in FP32 that make the gate pass (up to max_float_nodes).",
    )
    max_float_nodes: int = Field(
        16, ge=1, description="auto: at most this many nodes kept in FP32 before the stage gives up."
    )
