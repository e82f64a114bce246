"""What a run says about each stage and about itself: typed records, and the run summary
(summary.json) as a versioned record that the report, JUnit, `deploy plan` and the CLI
read back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from deploy.pipeline.errors import ExitCode
from deploy.pipeline.graph.contract import PARTIAL_KEY, UNCHECKED_KEY, Metrics
from deploy.pipeline.store.objects import Output, Store
from deploy.pipeline.store.provenance import Provenance


class Status(str, Enum):
    RAN = "ran"
    CACHED = "cached"
    SKIPPED = "skipped"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # running when the run was stopped (Ctrl-C, SIGTERM, SIGHUP)
    NOT_RUN = "not run"


class RunStatus(str, Enum):
    """The whole run's outcome, as the summary, report and CI files state it."""

    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    # Rejected before any stage ran (the CI files then hold one failed pseudo-stage).
    CONFIG_ERROR = "config error"
    SELECTION_ERROR = "selection error"


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

    @property
    def unchecked(self) -> dict[str, str]:
        """model -> why: what this verifier passed without checking (StageContext.unchecked)."""
        found = self.metrics.get(UNCHECKED_KEY)
        return {str(m): str(why) for m, why in found.items()} if isinstance(found, dict) else {}

    def summary(self, store: Store) -> StageSummary:
        """Its row in the run summary."""
        outputs = {
            n: OutputSummary(o.kind.value, o.digest, o.size, _where(store, o))
            for n, o in self.outputs.items()
        }
        return StageSummary(
            self.name,
            self.status,
            key=self.key,
            seconds=round(self.duration_s, 3),
            reasons=self.reasons,
            message=self.message,
            partial=self.partial,
            created=self.created or None,
            remote=self.remote,
            log=str(self.log) if self.log else None,
            outputs=outputs,
            metrics=self.metrics,
        )


class PublishState(str, Enum):
    """What became of an artifact marked for publishing (the repository), per destination."""

    VERIFIED = "verified"  # published after the stages that verify it passed
    UNVERIFIED = "unverified"  # published, but no stage of the config verifies it: said plainly
    WITHHELD = "withheld"  # not published: a verifier failed or did not run; the last one stays


@dataclass(frozen=True)
class PublishNote:
    """summary.json's record of one publish (or of one withheld), for the report and CI."""

    artifact: str
    destination: str
    state: PublishState
    verified_by: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    note: str = ""  # why withheld, and what the destination keeps
    unchecked: list[str] = field(default_factory=list)  # published, but its verifiers could not check them

    def text(self) -> str:
        if self.state is PublishState.VERIFIED:
            return f"published {self.destination} (verified by {', '.join(self.verified_by)}{self.unchecked_text()})"

        if self.state is PublishState.UNVERIFIED:
            return f"UNVERIFIED: published {self.destination} without a server check ({self.note})"
        return f"NOT PUBLISHED to {self.destination}: {self.note}"

    def unchecked_text(self) -> str:
        """e.g. "; UNVERIFIED, not loaded by its server: m_onnx, m_torchscript (no onnxruntime backend)"."""
        if not self.unchecked:
            return ""
        return f"; UNVERIFIED, not loaded by its server: {', '.join(self.unchecked)} ({self.note})"


# 2: `publishing` (what was published, verified or not, and what was withheld)
SUMMARY_SCHEMA = 2
READS = (1, SUMMARY_SCHEMA)  # schema 1 had no `publishing`: read as none


class SummarySchemaError(ValueError):
    """A run summary written with another layout (`schema`) than this release reads."""

    def __init__(self, source: str, found: object) -> None:
        self.source, self.found = source, found
        super().__init__(
            f"{source}: run summary schema {found!r}, this deploy reads schema {SUMMARY_SCHEMA} "
            "(written by another deploy release)"
        )


@dataclass(frozen=True)
class OutputSummary:
    kind: str
    digest: str
    bytes: int
    path: str  # where readers find it in the store


@dataclass(frozen=True)
class StageSummary:
    """One stage's row in summary.json."""

    stage: str
    status: Status
    key: str | None = None
    seconds: float = 0.0
    reasons: list[str] = field(default_factory=list)
    message: str = ""
    partial: str | None = None
    created: str | None = None
    remote: bool = False
    log: str | None = None
    outputs: dict[str, OutputSummary] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return asdict(self) | {"status": self.status.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageSummary:
        outputs = {n: OutputSummary(**o) for n, o in data.get("outputs", {}).items()}
        return cls(**{**data, "status": Status(data["status"]), "outputs": outputs})


@dataclass(frozen=True)
class RunSummary:
    """summary.json: the run's outcome and every stage of the pipeline, run or not."""

    pipeline: str
    config: str
    status: RunStatus
    stages: list[StageSummary]
    finished: str = ""
    wall_s: float = 0.0
    cache: str = ""
    message: str = ""  # why an invocation was rejected before anything ran
    provenance: Provenance | None = None
    publishing: list[PublishNote] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The layout summary.json always had, plus `schema`: the run's fields first, the
        stage rows last (every field present, at its default where it does not apply)."""
        return {
            "schema": SUMMARY_SCHEMA,
            "pipeline": self.pipeline,
            "config": self.config,
            "status": self.status.value,
            "message": self.message,
            "finished": self.finished,
            "wall_s": self.wall_s,
            "cache": self.cache,
            "provenance": asdict(self.provenance) if self.provenance is not None else None,
            "publishing": [asdict(n) | {"state": n.state.value} for n in self.publishing],
            "stages": [s.to_json() for s in self.stages],
        }

    @classmethod
    def from_json(cls, data: object, source: str = "run summary") -> RunSummary:
        """The record from its JSON; SummarySchemaError when `data` has another `schema`
        (a file from another deploy release), ValueError when it is not a run summary.
        `source` (the file) starts every message."""
        if not isinstance(data, Mapping) or data.get("schema") not in READS:
            raise SummarySchemaError(source, data.get("schema") if isinstance(data, Mapping) else None)
        try:
            stages = [StageSummary.from_json(s) for s in data["stages"]]
            skip = ("schema", "stages", "status", "provenance", "publishing")
            fields = {k: v for k, v in data.items() if k not in skip}
            found = data.get("provenance")
            provenance = Provenance(**found) if found else None
            notes = [
                PublishNote(**{**n, "state": PublishState(n["state"])}) for n in data.get("publishing", [])
            ]
            return cls(
                stages=stages,
                status=RunStatus(data["status"]),
                provenance=provenance,
                publishing=notes,
                **fields,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: not a run summary ({type(exc).__name__}: {exc})") from exc

    @classmethod
    def read(cls, path: Path) -> RunSummary:
        """summary.json read back: OSError when it cannot be read, SummarySchemaError
        (a ValueError) for another release's layout, ValueError for anything else."""
        text = path.read_text()
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{path}: not a run summary (not JSON: {exc})") from exc
        return cls.from_json(data, str(path))

    def failed(self) -> list[StageSummary]:
        return [s for s in self.stages if s.status is Status.FAILED]


def _where(store: Store, output: Output) -> str:
    """Where the output is read; a tree that cannot be laid out (a full disk) says so: the
    summary is written regardless."""
    try:
        return str(store.path_of(output))
    except OSError as exc:
        return f"(not laid out: {exc})"


def first_failed(results: list[StageResult]) -> StageResult | None:
    return next((r for r in results if r.status is Status.FAILED), None)
