"""eager.json, the golden stage's record of what the eager model is, beyond its answers:
the cases it was called at (their shapes), whether two calls on the same inputs agree,
how far its float32 answers are from float64's (the rounding every later runtime's
difference is measured against, before anyone is told to loosen a tolerance), the edge
cases left out and why, and the detections a fixed layout cut. Stdlib only: every
converting stage reads it when its parity gate fails (gates/diagnosis.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from deploy.pipeline.graph.records import read_record, record_json

# eager.json's layout; bumped with the golden stage's version.
SCHEMA = 1


@dataclass(frozen=True)
class Rounding:
    """One output at one case: eager float32 against eager float64."""

    max_abs: float
    scaled_err: float  # max_abs / max |float64 answer|


@dataclass(frozen=True)
class Truncated:
    """Detections the model found past model.detections.max_detections, per case."""

    case: str
    found: list[int]  # per image, what eager returned
    kept: int


@dataclass(frozen=True)
class EagerRecord:
    shapes: dict[str, dict[str, list[int]]]  # case -> input -> shape
    repeat_max_abs: dict[str, float]  # output -> two calls on the same inputs (0: identical)
    rounding: dict[str, dict[str, Rounding]] = field(default_factory=dict)  # case -> output
    rounding_note: str = ""  # why rounding was not measured, where it was not
    dropped: dict[str, str] = field(default_factory=dict)  # edge case -> why it was left out
    truncated: list[Truncated] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return record_json(self, SCHEMA)

    @classmethod
    def read(cls, path: Path) -> EagerRecord:
        return read_record(path, cls, SCHEMA, "an eager record")

    def rounding_of(self, case: str, output: str) -> Rounding | None:
        return self.rounding.get(case, {}).get(output)
