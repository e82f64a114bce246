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


def test_dict_keys_holding_dots_and_slashes_are_found_by_the_paths_init_writes() -> None:
    """init wrote `path: aux/score` for such a key, then refused its own config (the path's
    pattern), and a key 'head.logits' was split at its dot ("has no 'head'")."""
    from deploy.starter.inspection import discover

    score = torch.arange(6.0).reshape(2, 3)
    result = {"head.logits": score, "aux/score": score.sum(1), "nested": {"a.b": score * 2, "a": score * 3}}
    found = discover(returned_tensors(result), batched=True)
    specs = [OutputSpec(name=f.name, path=f.path) for f in found]  # validated as the config would be
    assert [(s.name, s.path) for s in specs] == [
        ("head_logits", "head.logits"),
        ("aux_score", "aux/score"),
        ("nested_a_b", "nested.a.b"),
        ("nested_a", "nested.a"),
    ]
    paths = find_outputs(result, specs)
    assert paths == [("head.logits",), ("aux/score",), ("nested", "a.b"), ("nested", "a")]
    got = [flat(result)[".".join(map(str, p))] for p in paths]
    assert [torch.equal(g, w) for g, w in zip(got, [score, score.sum(1), score * 2, score * 3])] == [True] * 4
