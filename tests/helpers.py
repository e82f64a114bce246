"""Running the pipeline in-process (torch imported once per test session)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.graph import select
from pipeline.project import load_project
from pipeline.runner import Runner, Selection, StageResult
from pipeline.store import Store


class Recorder:
    """A Reporter that keeps the warnings (e.g. about damaged cache entries)."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def started(self, name: str, reasons: list[str]) -> None:
        pass

    def finished(self, result: StageResult) -> None:
        pass

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def run(
    path: Path,
    only: Sequence[str] = (),
    force: Sequence[str] = (),
    start: str | None = None,
    stop: str | None = None,
    recorder: Recorder | None = None,
) -> dict[str, StageResult]:
    project = load_project(path)
    names = select(project.graph, list(only), start, stop)
    runner = Runner(project, Store(project.cache_dir), recorder or Recorder(), Selection(frozenset(names), frozenset(force)))
    return {r.name: r for r in runner.run()}


def statuses(results: dict[str, StageResult]) -> dict[str, str]:
    return {name: r.status.value for name, r in results.items()}


