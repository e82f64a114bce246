"""Verify, then publish. An artifact marked for publishing (the Triton repository) that a
configured stage verifies (`StageSpec.verifies`: smoke loads the candidate on a real
server and checks its answers) is held after the stage that made it, and published only
once every such stage has passed on that very output. A failed or skipped verifier
leaves every destination as it was, and says what it keeps; a run that never reached the
verifier publishes nothing. An output derived from one a verifier already passed
(select's `deployment`, from the smoked repository) is published as verified by it. An
artifact no stage of the config verifies is published, and said plainly to be unverified:
in the summary, the report's first screen and the repository's manifest.

The engine knows no stage by name: what verifies what is each stage's declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.pipeline.graph.contract import Artifact
from deploy.pipeline.graph.dag import ArtifactRef, Graph, Node
from deploy.pipeline.publish.readback import published_models
from deploy.pipeline.report.results import PublishNote, PublishState, StageResult, Status
from deploy.pipeline.store.objects import Output

if TYPE_CHECKING:
    from deploy.pipeline.publish.tree import Verification

Destination = Path | str
# Publishes one output to one destination with its verifiers; returns the model dirs and
# whether anything was written (a warm run writes nothing).
PublishFn = Callable[[Node, Output, Destination, "Verification"], tuple[list[str], bool]]
# The verifiers of the publish a local destination holds, if it holds exactly this output.
HoldsFn = Callable[[Output, Path], list[str] | None]
PASSED = (Status.RAN, Status.CACHED)


@dataclass
class Held:
    """An output waiting for its verifiers."""

    node: Node
    artifact: Artifact
    output: Output
    destinations: tuple[Destination, ...]
    verifiers: list[str]
    passed: list[str]
    unchecked: dict[str, str] = field(default_factory=dict)  # model -> why its verifier could not check it


class PublishGate:
    def __init__(
        self,
        graph: Graph,
        pipeline: str,
        publish: PublishFn,
        holds: HoldsFn,
        say: tuple[Callable[[str], None], Callable[[str], None]],
    ) -> None:
        """`say`: (warn, note): a withheld publish is warned; an unverified one noted (the
        closing line says it too; a run that warned is never replayed, one that noted is)."""
        self.graph, self.pipeline, self._publish = graph, pipeline, publish
        self._holds, (self._warn, self._note) = holds, say
        self.held: list[Held] = []
        self.notes: list[PublishNote] = []

    def accepted(
        self,
        node: Node,
        artifact: Artifact,
        output: Output,
        destinations: tuple[Destination, ...],
        done: set[str],
    ) -> None:
        """An output to publish: held for the stages that verify it, else published now
        (as verified by the verifiers it derives from, or as unverified)."""
        if not destinations:
            return
        after = [n.name for n in self.graph.nodes if artifact.name in n.spec.verifies and n.name != node.name]
        if after:
            self.held.append(Held(node, artifact, output, destinations, after, []))
            return
        before = [n.name for n in self._upstream(node) if n.spec.verifies and n.name in done]
        self._out(node, artifact, output, destinations, before)

    def finished(self, node: Node, result: StageResult) -> None:
        """A stage's result: for the outputs it verifies, a pass counts (when it checked
        that very output), a failure withholds them."""
        for held in [h for h in self.held if node.name in h.verifiers]:
            checked = node.bindings.get(held.artifact.name) == ArtifactRef(held.node.name, held.artifact.name)
            if result.status in PASSED and checked:
                held.passed.append(node.name)
                held.unchecked.update(result.unchecked)
            else:
                self._withhold(held, _why_not(node.name, result, checked))
                continue
            if set(held.passed) == set(held.verifiers):
                self.held.remove(held)
                self._out(
                    held.node, held.artifact, held.output, held.destinations, held.passed, held.unchecked
                )

    def close(self, interrupted: frozenset[str] = frozenset(), ended: frozenset[str] = frozenset()) -> None:
        """The run is over: what still waits was never verified in it (`interrupted`: the
        stages a stop cut short; `ended`: one that ended as the stop came, before its
        verdict could publish; each said as such)."""
        for held in list(self.held):
            missing = [v for v in held.verifiers if v not in held.passed]
            how = (
                "was interrupted"
                if set(missing) <= interrupted
                else "ended as the run was stopped, before its verdict could publish"
                if set(missing) <= ended
                else "did not run in this invocation"
            )
            self._withhold(held, f"{', '.join(missing)}, which verifies it, {how}")

    def _out(
        self,
        node: Node,
        artifact: Artifact,
        output: Output,
        destinations: Iterable[Destination],
        by: list[str],
        unchecked: dict[str, str] | None = None,
    ) -> None:
        from deploy.pipeline.publish.tree import Verification

        verified = sorted(by)
        stamp = Verification(tuple(verified), output.digest, tuple(sorted(unchecked or {})))
        for dest in destinations:
            try:
                models, _ = self._publish(node, output, dest, stamp)
            except KeyboardInterrupt:  # raised once its renames were done (tree.py defers it): recorded
                if isinstance(dest, Path) and self._holds(output, dest) is not None:
                    self._record(
                        artifact, dest, verified, published_models(dest, self.pipeline) or [], unchecked
                    )
                raise
            self._record(artifact, dest, verified, models, unchecked)

    def _record(
        self,
        artifact: Artifact,
        dest: Destination,
        verified: list[str],
        models: list[str],
        unchecked: dict[str, str] | None,
    ) -> None:
        left = sorted(unchecked or {})
        state = PublishState.VERIFIED if verified else PublishState.UNVERIFIED
        note = "; ".join(sorted(set((unchecked or {}).values())))
        if not verified:
            note = "no stage of this config verifies it: add smoke to check it on a real server"
        self.notes.append(PublishNote(artifact.name, str(dest), state, verified, models, note, left))
        if left:
            self._note(f"published to {dest} UNVERIFIED: {', '.join(left)} ({note})")

    def _withhold(self, held: Held, why: str) -> None:
        from deploy.pipeline.publish.readback import last_publish

        if held in self.held:
            self.held.remove(held)
        for dest in held.destinations:
            earlier = self._holds(held.output, dest) if isinstance(dest, Path) else None
            if earlier:  # this very output, verified when it was published: nothing withheld
                note = f"{dest} holds it already, as verified by {', '.join(earlier)} when it was published"
                self.notes.append(
                    PublishNote(held.artifact.name, str(dest), PublishState.VERIFIED, earlier, note=note)
                )
                continue
            kept = (
                last_publish(dest, self.pipeline) if isinstance(dest, Path) else f"{dest} is left as it was"
            )
            note = f"{why}; {kept}"
            self.notes.append(PublishNote(held.artifact.name, str(dest), PublishState.WITHHELD, note=note))
            self._warn(f"not published to {dest}: {note}")

    def _upstream(self, node: Node) -> list[Node]:
        """Every stage `node` reads from, transitively."""
        seen: dict[str, Node] = {}
        todo = list(node.upstream())
        while todo:
            name = todo.pop()
            if name not in seen:
                seen[name] = self.graph.node(name)
                todo += list(seen[name].upstream())
        return list(seen.values())


def _why_not(verifier: str, result: StageResult, checked: bool) -> str:
    if not checked:
        return f"{verifier} checked another link of its chain, not this output"
    if result.status is Status.SKIPPED:
        return f"{verifier}, which verifies it, was skipped ({result.message or 'no reason given'})"
    return f"{verifier}, which verifies it, {result.status.value}"
