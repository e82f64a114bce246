"""The eager model's generations, golden's record for a decoder (config `model.decoder`):
prompts of varied lengths and the greedy tokens eager PyTorch generates after each, with
the stop tokens it used (stages/golden/generate.py makes it). Smoke holds the served
generate loops to these tokens exactly. A model without a decoder gets an empty record
(the artifact is always written)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from deploy.spec.tensors import Frozen

if TYPE_CHECKING:
    from deploy.spec.config import DeployConfig

GENERATIONS_VERSION = 1


PROMPT_LENGTHS = (1, 5, 12, 31)  # cut to the declared sequence range


def random_prompts(config: DeployConfig, rng: Any) -> list[list[int]]:
    """One prompt per length that fits input_ids' declared sequence range, ids drawn from
    its value range: golden's prompts, and the decoder gate's where it is given none."""
    ids = config.inputs[0]
    low, high = ids.value_range or (0, 1)
    lengths = sorted({min(max(n, ids.min[1]), ids.max[1]) for n in PROMPT_LENGTHS})
    return [[int(t) for t in rng.integers(int(low), int(high) + 1, size=n)] for n in lengths]


class Generation(Frozen):
    prompt: list[int]
    tokens: list[int]


class Generations(Frozen):
    version: int = GENERATIONS_VERSION
    how: Literal["transformers generate", "eager loop", "none"] = "none"
    stop: list[int] = Field(default_factory=list)
    max_new_tokens: int = 0
    cases: list[Generation] = Field(default_factory=list)

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1))

    @classmethod
    def read(cls, path: Path) -> Generations:
        return cls.model_validate(json.loads(path.read_text()))
