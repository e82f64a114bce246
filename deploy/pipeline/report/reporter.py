"""What the runner tells whoever shows a run (the CLI's console, a test's recorder): a
stage started, finished, a warning, a note, progress."""

from __future__ import annotations

from typing import Protocol

from deploy.pipeline.process.progress import Progress
from deploy.pipeline.report.results import RunStatus as RunStatus
from deploy.pipeline.report.results import StageResult as StageResult
from deploy.pipeline.report.results import Status as Status


class Reporter(Protocol):
    def started(self, name: str, reasons: list[str]) -> None: ...
    def finished(self, result: StageResult) -> None: ...
    def warn(self, message: str) -> None: ...
    def note(self, message: str) -> None: ...
    def progress(self, event: Progress) -> None: ...
