"""The run summary as the runner ends a run: one row per stage (those never reached
included), written with the run's history and report; on a full disk, still written
where there is room, and said where."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from deploy.pipeline.errors import DiskFull
from deploy.pipeline.graph.hashing import write_with_room
from deploy.pipeline.graph.project import Project
from deploy.pipeline.report.results import (
    PublishNote,
    RunStatus,
    RunSummary,
    StageResult,
    StageSummary,
    Status,
)
from deploy.pipeline.store import history, provenance
from deploy.pipeline.store.objects import Store


@dataclass(frozen=True)
class RunOf:
    """What a summary says a run was of: the project, its store, the publishing notes."""

    project: Project
    store: Store
    notes: tuple[PublishNote, ...]


def write_summary(
    run: RunOf, results: list[StageResult], seconds: float, outcome: RunStatus, warn: Callable[[str], None]
) -> RunSummary:
    done = {r.name for r in results}
    rows = [r.summary(run.store) for r in results]
    rows += [StageSummary(n, Status.NOT_RUN) for n in run.project.graph.names() if n not in done]
    summary = RunSummary(
        run.project.config.name,
        str(run.project.path),
        outcome,
        rows,
        finished=datetime.now(UTC).isoformat(timespec="seconds"),
        wall_s=round(seconds, 3),
        cache=str(run.store.root),
        provenance=provenance.collect(run.project.path),
        publishing=list(run.notes),
    )
    try:
        history.record(run.project.run_dir, summary, _images(run, results), warn)
    except DiskFull as full:  # the summary still goes somewhere (the temp dir), and says where
        where = write_with_room(run.project.run_dir / "summary.json", json.dumps(summary.to_json(), indent=1))
        warn(f"{full}; the run's summary is at {where}")
    return summary


def _images(run: RunOf, results: list[StageResult]) -> dict[str, list[Path]]:
    """stage -> its .png artifacts in the store, for the run report."""
    found: dict[str, list[Path]] = {}
    for result in results:
        spec = run.project.graph.node(result.name).spec
        pngs = [a.name for a in spec.outputs if a.relpath.endswith(".png") and a.name in result.outputs]
        found[result.name] = [run.store.path_of(result.outputs[n]) for n in pngs]
    return found
