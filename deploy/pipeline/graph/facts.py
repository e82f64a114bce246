"""Facts one stage's params state for other stages (where the Triton repository is
published, say): declared once as a `Fact` in a shared library beside the record it
carries, provided by one stage's spec (`StageSpec.provides`), and read with
`pipeline.graph.registry.read_fact(config, F)`, which validates the provider's section with
its own params model. So a stage never reads another stage's raw YAML section
(tests/test_layers.py checks), and the engine names neither of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from deploy.domain.issues import Issue

T = TypeVar("T")
P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class Fact(Generic[T]):
    name: str
    default: T  # what readers get when no configured stage provides it


@dataclass(frozen=True)
class Provides(Generic[P, T]):
    """A stage's declaration that its validated params answer `fact`."""

    fact: Fact[T]
    read: Callable[[P], T]


def duplicate_issues(provided: dict[str, tuple[Provides[Any, Any], ...]]) -> list[Issue]:
    """Two configured stages may not state the same fact (readers would get either)."""
    owners: dict[str, list[str]] = {}
    for stage, declared in provided.items():
        for p in declared:
            owners.setdefault(p.fact.name, []).append(stage)
    return [
        Issue(f"stages.{names[1]}", f"states '{name}' as stages.{names[0]} does; keep one of them")
        for name, names in owners.items()
        if len(names) > 1
    ]
