"""What a model returned, as the pipeline finds its tensors (deploy/modelio/outputs.py)."""

from __future__ import annotations

import dataclasses

import torch

from deploy.modelio.outputs import find_outputs, flat, returned_tensors
from deploy.spec.tensors import OutputSpec


@dataclasses.dataclass
class Scored:
    scores: torch.Tensor
    features: torch.Tensor
    note: str = "not a tensor"


def test_a_dataclass_answer_is_found_by_its_fields() -> None:
    """init and optimize said "the model returned no tensors" for it, though `run` could
    reach its fields by path."""
    result = Scored(torch.ones(2, 3), torch.zeros(2, 4))
    assert returned_tensors(result) == [("scores", (2, 3), "float32"), ("features", (2, 4), "float32")]
    assert torch.equal(flat(result)["features"], result.features)
    specs = [OutputSpec(name="features"), OutputSpec(name="scores")]  # by name, in any order
    assert find_outputs(result, specs) == [("features",), ("scores",)]
