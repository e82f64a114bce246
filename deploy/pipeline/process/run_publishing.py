"""A run's publishing: what a stage produces reaches its destinations only as the
verify-then-publish gate (publish/verification.py) lets it, and a publish that fails
fails the result that allowed it, whose cached output the next run publishes again."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from deploy.pipeline.errors import DeployError
from deploy.pipeline.graph.contract import Artifact
from deploy.pipeline.graph.dag import Node, rewritten
from deploy.pipeline.graph.project import Project
from deploy.pipeline.publish.readback import holds
from deploy.pipeline.publish.tree import Verification, publish
from deploy.pipeline.publish.verification import PASSED, PublishGate
from deploy.pipeline.report.reporter import Reporter
from deploy.pipeline.report.results import StageResult, Status
from deploy.pipeline.store.objects import Output, Store


class RunPublishing:
    """The gate of one run, and where it published (destination, its model dirs)."""

    def __init__(
        self, project: Project, store: Store, reporter: Reporter, needed: Callable[[], Iterable[Node]]
    ) -> None:
        self.project, self.store, self.reporter, self._needed = project, store, reporter, needed
        self.published: list[tuple[Path | str, list[str]]] = []
        self.gate = PublishGate(
            project.graph,
            project.config.name,
            self._publish,
            lambda output, dest: holds(store, output, dest, project.config.name),
            (reporter.warn, reporter.note),
        )
        self._publishing: StageResult | None = None  # whose result a publish failure fails

    def accepted(self, node: Node, result: StageResult, passed: set[str]) -> None:
        """A stage's outputs, cached: published, or held for the stages that verify them;
        a publish that fails fails this result (the next run retries)."""
        self._publishing = result
        try:
            for artifact in node.spec.outputs:
                if artifact.name in result.outputs:
                    output = result.outputs[artifact.name]
                    self.gate.accepted(node, artifact, output, self.destinations(node, artifact), passed)
        except DeployError as exc:
            result.status, result.message, result.exit_code = Status.FAILED, str(exc), exc.exit_code

    def verified(self, node: Node, result: StageResult) -> None:
        """A verifier's result releases (or withholds) what waits for it; a publish that
        fails then fails this stage's result (the next run retries)."""
        self._publishing = result
        try:
            self.gate.finished(node, result)
        except DeployError as exc:  # its checks passed: what failed is the publish they allowed
            said = f"its checks passed, then {exc}" if result.status in PASSED else str(exc)
            result.status, result.message, result.exit_code = Status.FAILED, said, exc.exit_code

    def destinations(self, node: Node, artifact: Artifact) -> tuple[Path | str, ...]:
        """Where `artifact` is published: one terminal publish, by the last link of its
        chain this run executes (triton_search's tuned repository, not triton_config's
        before it), so a repository is written once per run and never as an earlier link."""
        if rewritten(node, artifact.name, self._needed()):
            return ()
        return node.spec.destinations(node.params, self.project.config, artifact)

    def _publish(
        self, node: Node, output: Output, dest: Path | str, verified: Verification
    ) -> tuple[list[str], bool]:
        done = publish(self.store, output, dest, self.project.config.name, verified)
        if self._publishing is not None:
            self._repaired(self._publishing, dest, done.repaired)
        self.published.append((dest, done.models))
        return done.models, bool(done.written)

    def _repaired(self, result: StageResult, dest: Path | str, repaired: dict[str, list[str]]) -> None:
        """Published files changed behind deploy's back, now restored: said, and kept in
        the summary as the stage's message."""
        for model, files in repaired.items():
            note = f"restored {dest}/{model}: {', '.join(files)} had changed since it was published"
            self.reporter.warn(f"{result.name}: {note}")
            result.message = f"{result.message}; {note}" if result.message else note
