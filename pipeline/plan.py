"""What would run, and why, derived from keys alone (nothing is executed or imported).

A stage whose inputs come from a stage that must rerun cannot know its own key
yet: it is `pending`, and will hit the cache anyway if the upstream output comes out
byte-identical (the exports are deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pipeline import keys
from pipeline.graph import Node
from pipeline.project import Project
from pipeline.source import source_digest
from pipeline.stage import SOURCE_ARTIFACT, ArtifactKind
from pipeline.store import Output, Store


class Action(str, Enum):
    CACHED = "cached"
    RUN = "run"
    PENDING = "pending"  # reruns if an upstream stage's output changes


@dataclass
class PlanRow:
    name: str
    action: Action
    key: str | None
    reasons: list[str] = field(default_factory=list)


def source_outputs(project: Project, store: Store) -> dict[str, Output]:
    digest = source_digest(project.config.model, store.memo)
    return {SOURCE_ARTIFACT: Output(ArtifactKind.FILE, digest, 0)}


ABSENT = "absent"


def stage_parts(
    node: Node, project: Project, resolved: dict[str, Output], absent: frozenset[str] = frozenset()
) -> dict[str, Any] | None:
    """The key material of a stage, or None while an input's digest is unknown. Optional
    inputs whose producer was skipped enter the key as absent."""
    digests = {}
    for name, ref in node.bindings.items():
        if str(ref) in resolved:
            digests[name] = resolved[str(ref)].digest
        elif name in node.spec.optional_inputs and str(ref) in absent:
            digests[name] = ABSENT
        else:
            return None
    return keys.components(node.spec, node.params, project.config, digests)


def why(
    node: Node, project: Project, store: Store, parts: dict[str, Any] | None, resolved: dict[str, Output]
) -> list[str]:
    last = store.head(project.config.name).get(node.name, {}).get("components")
    if parts is not None:
        return keys.reasons(last, parts) or ["same key as the last run, but no cache entry for it"]
    own = keys.components(node.spec, node.params, project.config, {})
    changed = [r for r in keys.reasons(last, own) if not r.startswith(("inputs.", "inputs:"))]
    waiting = [str(ref.stage) for ref in node.bindings.values() if str(ref) not in resolved]
    return [f"waits for {', '.join(dict.fromkeys(waiting))}", *changed]


def make_plan(project: Project, store: Store) -> list[PlanRow]:
    resolved = {f"{n}": o for n, o in source_outputs(project, store).items()}
    rows = []
    for node in project.graph.nodes:
        parts = stage_parts(node, project, resolved)
        if parts is None:
            rows.append(PlanRow(node.name, Action.PENDING, None, why(node, project, store, None, resolved)))
            continue
        key = keys.key_of(parts)
        entry, problem = store.lookup(key)
        if entry is not None:
            resolved.update({f"{node.name}.{n}": o for n, o in entry.outputs.items()})
            rows.append(PlanRow(node.name, Action.CACHED, key))
        else:
            extra = [f"cache entry is damaged: {problem}"] if problem else []
            rows.append(PlanRow(node.name, Action.RUN, key, why(node, project, store, parts, resolved) + extra))
    return rows
