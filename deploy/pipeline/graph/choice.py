"""Which stages a run runs and which it forces (`--from`, `--to`, `--only`, `--force`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from deploy.pipeline.report.results import RunStatus as RunStatus
from deploy.pipeline.report.results import StageResult as StageResult
from deploy.pipeline.report.results import Status as Status

ALL_STAGES = "all"  # --force all: every stage, as written in a force list


@dataclass(frozen=True)
class StageSelection:
    run: frozenset[str]
    force: frozenset[str] = frozenset()
    # Redo a cached result its stage called provisional (a bench timed on a busy machine):
    # `deploy run --wait-quiet` asks for a quiet measurement, which a replay would never give.
    redo_provisional: bool = False

    def forced(self, name: str) -> bool:
        return name in self.force or ALL_STAGES in self.force

    def redo(self, provisional: object) -> str | None:
        """Why a cached entry marked provisional runs again (None: it is a hit)."""
        if not (self.redo_provisional and provisional):
            return None
        return f"its cached result was provisional ({provisional}): measured again"


def outside_message(stage: str) -> str:
    """Why a stage outside the selection cannot be served: it has no cached result."""
    return (
        f"stage '{stage}' is outside the selected stages and has no cached result "
        f"for its current inputs; include it (e.g. --from {stage})"
    )


def resume_command(config: Path, stage: str, cache: Path | None) -> str:
    """The command that resumes at `stage`; `cache`: the run's where it is not the config's
    own (--cache-dir, $DEPLOY_CACHE_DIR), since the resume must find the stages before cached."""
    given = f" --cache-dir {shlex.quote(str(cache.absolute()))}" if cache is not None else ""
    return f"deploy run {config} --from {stage}{given}"
