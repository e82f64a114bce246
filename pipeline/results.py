"""What a run says about each stage and about itself: typed records, and their JSON in
the run summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from pipeline.errors import ExitCode
from pipeline.stage import PARTIAL_KEY, Metrics
from pipeline.store import Output, Store


class Status(str, Enum):
    RAN = "ran"
    CACHED = "cached"
    SKIPPED = "skipped"
    FAILED = "failed"
    NOT_RUN = "not run"


class RunStatus(str, Enum):
    """The whole run's outcome, as the summary, report and CI files state it."""

    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass
class StageResult:
    name: str
    status: Status
    key: str | None = None
    duration_s: float = 0.0
    reasons: list[str] = field(default_factory=list)
    outputs: dict[str, Output] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=dict)
    log: Path | None = None
    message: str = ""
    # A failure's exit code: a stage's own failure (1), a missing library (4), a stage
    # outside the selection with nothing cached (3).
    exit_code: ExitCode = ExitCode.STAGE
    created: str = ""  # when a cached result was made
    remote: bool = False  # downloaded from the remote cache this run

    @property
    def partial(self) -> str | None:
        """Set by a stage that passed with parts of it skipped (StageContext.partial)."""
        note = self.metrics.get(PARTIAL_KEY)
        return str(note) if note else None

    def to_json(self, store: Store) -> dict[str, Any]:
        """Its row in the run summary."""
        return {
            "stage": self.name,
            "status": self.status.value,
            "key": self.key,
            "seconds": round(self.duration_s, 3),
            "reasons": self.reasons,
            "message": self.message,
            "partial": self.partial,
            "created": self.created or None,
            "remote": self.remote,
            "log": str(self.log) if self.log else None,
            "outputs": {
                n: {"kind": o.kind.value, "digest": o.digest, "bytes": o.size, "path": str(store.path_of(o))}
                for n, o in self.outputs.items()
            },
            "metrics": self.metrics,
        }
