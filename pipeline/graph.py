"""The stage graph, built from artifact names and validated when built.

Stages run in the order the YAML lists them. Each declared input binds to the
*nearest earlier* stage that outputs an artifact of that name, so a transform such
as `simplify` (onnx -> onnx) can be dropped from the YAML and `validate` then reads
`export`'s ONNX. A missing or later producer is a config error, found before running.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from pipeline.errors import ConfigError, Issue
from pipeline.stage import SOURCE_ARTIFACT, StageSpec


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


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]

    def names(self) -> list[str]:
        return [node.name for node in self.nodes]

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)


def build_graph(stages: list[tuple[StageSpec, BaseModel]]) -> Graph:
    latest: dict[str, ArtifactRef] = {SOURCE_ARTIFACT: ArtifactRef(None, SOURCE_ARTIFACT)}
    all_producers = {a.name: spec.name for spec, _ in stages for a in spec.outputs}
    nodes, issues = [], []
    for spec, params in stages:
        wanted = spec.inputs_for(params)
        bindings = {name: latest[name] for name in wanted if name in latest}
        issues += [_unbound(spec.name, name, all_producers.get(name)) for name in wanted if name not in latest]
        nodes.append(Node(spec, params, bindings))
        latest.update({a.name: ArtifactRef(spec.name, a.name) for a in spec.outputs})
    if issues:
        raise ConfigError("stage graph", issues)
    return Graph(tuple(nodes))


def _unbound(stage: str, artifact: str, producer: str | None) -> Issue:
    where = f"stages.{stage}"
    if producer is None:
        return Issue(where, f"needs artifact '{artifact}', which no stage in this config produces")
    return Issue(
        where,
        f"needs artifact '{artifact}' from stage '{producer}', which comes later; list it earlier",
    )


def select(graph: Graph, only: list[str], start: str | None, stop: str | None) -> list[str]:
    """Names of the stages to run: --only, or the range --from..--to (inclusive)."""
    names = graph.names()
    unknown = [n for n in [*only, start, stop] if n is not None and n not in names]
    if unknown:
        issues = [Issue("stage selection", f"unknown stage '{n}' (stages: {', '.join(names)})") for n in unknown]
        raise ConfigError("command line", issues)
    if only:
        if start or stop:
            raise ConfigError("command line", [Issue("--only", "cannot be combined with --from/--to")])
        return [n for n in names if n in only]
    lo = names.index(start) if start else 0
    hi = names.index(stop) if stop else len(names) - 1
    if lo > hi:
        raise ConfigError("command line", [Issue("--from/--to", f"'{start}' comes after '{stop}'")])
    return names[lo : hi + 1]
