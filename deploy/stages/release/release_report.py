"""release.json: what a release did to each model, the stage's typed, versioned record."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from deploy.serving.releases import Agreement, Comparison

SCHEMA = 2  # 2: ratios are time new / deployed (per_item_ratio); the held action


class ReleaseAction(str, Enum):
    FIRST = "first release"  # nothing deployed: version 1
    RELEASED = "released"  # a new version beside the deployed one
    UNCHANGED = "unchanged"  # the deployed version holds the same files: no new version
    REFUSED = "refused"  # the gate refused it: nothing published
    INCONCLUSIVE = "inconclusive"  # a speed ratio's interval straddles the gate: nothing published
    HELD = "held back"  # passed, but another model of the pipeline did not: nothing published


@dataclass(frozen=True)
class ModelRelease:
    model: str
    action: ReleaseAction
    version: int | None  # the version placed, or the unchanged one; None when nothing was placed
    against: int | None = None  # the deployed version compared with
    comparison: Comparison | None = None
    problems: list[str] = field(default_factory=list)  # why the gate refused it
    note: str = ""  # e.g. why a model was compared by its files only


@dataclass(frozen=True)
class ReleaseReport:
    models: list[ModelRelease]
    gate: dict[str, Any]
    accepted_regression: str | None = None
    schema: int = SCHEMA

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> ReleaseReport:
        data = json.loads(text)
        if data.get("schema") != SCHEMA:
            raise ValueError(f"release.json schema {data.get('schema')!r}, expected {SCHEMA}")
        models = [_model(m) for m in data["models"]]
        return cls(models, data["gate"], data.get("accepted_regression"))


def _model(data: dict[str, Any]) -> ModelRelease:
    comparison = data.get("comparison")
    if comparison is not None:
        agreement = [Agreement(**a) for a in comparison["agreement"]]
        comparison = Comparison(**{**comparison, "agreement": agreement})
    return ModelRelease(**{**data, "action": ReleaseAction(data["action"]), "comparison": comparison})
