"""The stage graph, built from artifact names and validated when built.

The YAML's key order means nothing (a config written by `yaml.safe_dump` sorts keys).
Binding, per artifact name:

- its *origin* is the one stage that outputs it without reading it (export for `onnx`);
  the pipeline's source `model` has no stage;
- its *transforms* read and rewrite it (simplify: onnx -> onnx); they form a chain after
  the origin, ordered by the stages' phase, then name;
- a stage that reads the artifact binds to the end of that chain, a transform to the link
  before it. So dropping `simplify` makes `validate` read `export`'s ONNX.

Stages run in dependency order; among stages that are ready at the same time, by phase
(convert, analyse, verify, package, serve, measure), then by name. An artifact nobody
makes, two origins of one artifact that some stage reads, or a cycle is a config error.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError, UsageError
from deploy.pipeline.graph.contract import SOURCE_ARTIFACT, StageSpec


@dataclass(frozen=True)
class ArtifactRef:
    stage: str | None  # None: the pipeline's source (the model itself)
    name: str

    def __str__(self) -> str:
        return self.name if self.stage is None else f"{self.stage}.{self.name}"


@dataclass(frozen=True)
class Node:
    spec: StageSpec
    params: BaseModel
    bindings: dict[str, ArtifactRef]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def wanted(self) -> tuple[str, ...]:
        return self.spec.inputs_for(self.params)

    def upstream(self) -> set[str]:
        return {ref.stage for ref in self.bindings.values() if ref.stage is not None}


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]  # in execution order

    def names(self) -> list[str]:
        return [node.name for node in self.nodes]

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)


def rewritten(node: Node, artifact: str, among: Iterable[Node]) -> bool:
    """Whether a stage in `among` is the next link of `artifact`'s chain after `node`: it
    reads `node`'s output and writes one of the same name (triton_search after
    triton_config for `repository`)."""
    ref = ArtifactRef(node.name, artifact)
    return any(
        n.bindings.get(artifact) == ref and any(o.name == artifact for o in n.spec.outputs) for n in among
    )


Stage = tuple[StageSpec, BaseModel]


def canonical(spec: StageSpec) -> tuple[int, str]:
    return (int(spec.phase), spec.name)


def build_graph(stages: list[Stage]) -> Graph:
    ordered = sorted(stages, key=lambda s: canonical(s[0]))
    chains, issues = _chains(ordered)
    nodes = [Node(spec, params, {}) for spec, params in ordered]
    for node in nodes:
        issues += _bind(node, chains)
    if issues:
        raise ConfigError("stage graph", issues)
    return Graph(_execution_order(nodes))


def _chains(stages: list[Stage]) -> tuple[dict[str, list[str | None]], list[Issue]]:
    """artifact -> [origin, transform, ...]; None stands for the pipeline's source."""
    chains: dict[str, list[str | None]] = {SOURCE_ARTIFACT: [None]}
    origins: dict[str, list[str]] = {}
    transforms: dict[str, list[str]] = {}
    for spec, params in stages:  # canonical order, so each chain is too
        reads = set(spec.inputs_for(params))
        for artifact in (a.name for a in spec.outputs):
            (transforms if artifact in reads else origins).setdefault(artifact, []).append(spec.name)
    issues = []
    for artifact in sorted(set(origins) | set(transforms)):
        found = origins.get(artifact, [])
        if len(found) > 1:
            chains[artifact] = []  # ambiguous: an error only for a stage that reads it
            continue
        chains[artifact] = [*found, *transforms.get(artifact, [])]
        if not found:
            issues.append(_unmade(transforms[artifact][0], artifact))
    return chains, issues


def _unmade(stage: str, artifact: str) -> Issue:
    return Issue(f"stages.{stage}", f"needs artifact '{artifact}', which no stage in this config produces")


def _bind(node: Node, chains: dict[str, list[str | None]]) -> list[Issue]:
    issues = []
    for artifact in node.wanted:
        chain = chains.get(artifact)
        if chain is None and artifact in node.spec.if_configured:
            continue
        if chain is None:
            issues.append(_unmade(node.name, artifact))
        elif not chain:
            issues.append(
                Issue(
                    f"stages.{node.name}",
                    f"needs artifact '{artifact}', which several stages produce; keep one",
                )
            )
        elif node.name not in chain:
            node.bindings[artifact] = ArtifactRef(chain[-1], artifact)
        elif (link := chain.index(node.name)) > 0:  # a transform reads the link before it
            node.bindings[artifact] = ArtifactRef(chain[link - 1], artifact)
    return issues


def _execution_order(nodes: list[Node]) -> tuple[Node, ...]:
    """Kahn's algorithm; among ready stages the canonical (phase, name) order."""
    by_name = {n.name: n for n in nodes}
    waiting = {n.name: n.upstream() for n in nodes}
    ready = [(canonical(n.spec), n.name) for n in nodes if not waiting[n.name]]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(by_name[name])
        for other, needs in waiting.items():
            if name in needs:
                needs.discard(name)
                if not needs:
                    heapq.heappush(ready, (canonical(by_name[other].spec), other))
    if len(order) < len(nodes):
        stuck = sorted(set(by_name) - {n.name for n in order})
        raise ConfigError(
            "stage graph", [Issue("stages", f"stages depend on each other in a cycle: {', '.join(stuck)}")]
        )
    return tuple(order)


def select(graph: Graph, only: list[str], start: str | None, stop: str | None) -> list[str]:
    """Names of the stages to run: --only, or the range --from..--to (inclusive) of the
    execution order."""
    names = graph.names()
    unknown = [n for n in [*only, start, stop] if n is not None and n not in names]
    if unknown:
        issues = [
            Issue("stage selection", f"unknown stage '{n}' (stages: {', '.join(names)})") for n in unknown
        ]
        raise UsageError("command line", issues)
    if only:
        if start or stop:
            raise UsageError("command line", [Issue("--only", "cannot be combined with --from/--to")])
        return [n for n in names if n in only]
    lo = names.index(start) if start else 0
    hi = names.index(stop) if stop else len(names) - 1
    if lo > hi:
        raise UsageError("command line", [Issue("--from/--to", f"'{start}' comes after '{stop}'")])
    return names[lo : hi + 1]
