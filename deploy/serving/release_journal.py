"""A pipeline's release, or rollback, as one transaction: every model switches to the new
checkpoint (or back), or none does.

The journal (`.deploy-<pipeline>.release-journal` at the repository's root) is written
before the first model is touched, and names each model's new version, the candidate's
config and the config it had. Then:

  1. pin: each model's config serves only the version it serves now, so a server polling
     the repository does not load a new version as it appears (explicit model control
     loads nothing until asked);
  2. place: every new version dir, each one rename of a verified, staged copy;
  3. the journal turns to `switching`: from here the release is completed, never undone;
  4. switch: each model's config becomes the candidate's (Triton's default policy: the
     newest version), one atomic replace after another;
  5. settle: prune and stamp each model dir; mirror to `publish_to`; tell the live
     servers to load;
  6. the journal is removed.

A rollback's journal (kind `rollback`) is written `switching` at once: it places nothing,
only replaces configs and marks records, so recovery always completes it.

After a kill anywhere, `recover()` (run first by every command that touches the
repository) removes what dead processes left (temp files, staging), reverts a journal
still `placing` (new versions removed, the configs as they were) and completes one
`switching`. A poll-mode server sees a mix only between two
config replaces of step 4 (plus its poll interval); an explicit-mode server only while
it is told to load model after model (step 5). A catchable stop (Ctrl-C, SIGTERM of
`deploy` or of the stage's child) arriving in steps 3-4 takes effect once they are done,
so only a SIGKILL there leaves a mix, until the next command completes the journal.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from deploy.pipeline.graph.hashing import atomic_write_text
from deploy.pipeline.graph.records import SchemaMismatch, expect_schema, typed
from deploy.pipeline.process import faults
from deploy.serving import releases
from deploy.serving.releases import ReleaseRecord

SCHEMA = 2  # 2: `kind` (a release or a rollback) and a rollback's `marks`; 1 read as a release
SUFFIX = ".release-journal"
CONFIG_FILE = "config.pbtxt"


class Step(StrEnum):
    PLACING = "placing"  # reverted after a kill
    SWITCHING = "switching"  # completed after a kill


class Kind(StrEnum):
    RELEASE = "release"  # new versions placed, then every config switched
    ROLLBACK = "rollback"  # every config pointed at a kept version, its records marked


@dataclass(frozen=True)
class JournalEntry:
    model: str
    version: int
    source: str  # the verified candidate version dir (in the cache)
    config: str  # the candidate's config.pbtxt
    before: str | None  # the config the model dir had (None: a first release)
    record: str  # the release record (JSON), written into the version ("" for a rollback)
    # A rollback's marks: version -> its record's rolled_back note (None: good again).
    marks: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Journal:
    pipeline: str
    keep: int
    entries: list[JournalEntry]
    servers: list[str] = field(default_factory=list)
    remote: str | None = None  # publish_to: mirrored before any server is told (it may read the copy)
    step: Step = Step.PLACING
    kind: Kind = Kind.RELEASE
    schema: int = SCHEMA

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Journal:
        """The journal, checked field by field: recovery acts on nothing it had to guess."""
        data = json.loads(text)
        if isinstance(data, dict) and data.get("schema") == 1:  # before rollbacks were journaled
            data = {**data, "schema": SCHEMA}
        journal: Journal = typed(cls, expect_schema(data, "release journal", SCHEMA), "not a release journal")
        return journal

    def said(self) -> str:
        """The models and versions, for recovery's line."""
        to = " to" if self.kind is Kind.ROLLBACK else ""
        return ", ".join(f"{e.model}{to} v{e.version}" for e in self.entries)


def path(repository: Path, pipeline: str) -> Path:
    return repository / f".deploy-{pipeline}{SUFFIX}"  # beside, never taken for, the manifest (.json)


def fault(point: str) -> None:
    """A fault-injection point (pipeline/process/faults.py): with DEPLOY_FAULT=<point> the process
    dies here by SIGKILL."""
    faults.point(point)


def entry(model_dir: Path, candidate: Path, record: ReleaseRecord) -> JournalEntry:
    config = model_dir / CONFIG_FILE
    before = config.read_text() if config.is_file() else None
    text = (candidate.parent / CONFIG_FILE).read_text()
    return JournalEntry(model_dir.name, record.version, str(candidate), text, before, record.to_json())


def commit(repository: Path, journal: Journal) -> list[str]:
    """Places and switches every entry's version, or (killed) leaves a journal that
    `recover` reverts or completes. Returns the live servers that did not switch."""
    for e in journal.entries:
        releases.sweep(repository / e.model)
    atomic_write_text(path(repository, journal.pipeline), journal.to_json())
    fault("journal")
    for e in journal.entries:
        _pin(repository / e.model)
    fault("pinned")
    for e in journal.entries:  # a stop in here leaves every model serving its pinned version
        record = ReleaseRecord.from_json(e.record)
        releases.place(repository / e.model, Path(e.source), record)
        fault(f"placed:{e.model}")
    switching = replace(journal, step=Step.SWITCHING)
    with _whole():
        atomic_write_text(path(repository, journal.pipeline), switching.to_json())
        fault("switching")
        _switch(repository, switching)
    return _settle(repository, switching)


@contextlib.contextmanager
def _whole() -> Iterator[None]:
    """The switch, atomic writes of small configs, milliseconds long: a catchable stop (Ctrl-C, SIGTERM of
    `deploy`, of the stage's child) waits for its end, so no server is left serving one
    model's new version beside another's old one until the next command; a SIGKILL
    leaves the journal, which the next command reverts or completes."""
    from deploy.pipeline.process import lifeline, stopping

    with stopping.deferred(), lifeline.whole():
        yield


def _pin(model_dir: Path) -> None:
    served = releases.served(model_dir) if (model_dir / CONFIG_FILE).is_file() else set()
    if served:
        releases.serve_only(model_dir, max(served))


def _complete(repository: Path, journal: Journal) -> list[str]:
    with _whole():
        _switch(repository, journal)
    return _settle(repository, journal)


def _switch(repository: Path, journal: Journal) -> None:
    """Step 4: every model's config becomes the candidate's, one atomic replace each."""
    for e in journal.entries:
        atomic_write_text(repository / e.model / CONFIG_FILE, e.config)
        fault(f"switched:{e.model}")


def _settle(repository: Path, journal: Journal) -> list[str]:
    """Step 5 and 6: prune, mark and stamp, mirror, tell the live servers; the journal goes."""
    from deploy.serving.switch import switch_all

    for e in journal.entries:
        model_dir = repository / e.model
        releases.sweep(model_dir)
        for version, note in e.marks.items():  # a rollback's: idempotent, so a replay is harmless
            releases.mark_rolled_back(model_dir, int(version), note)
        if journal.kind is Kind.RELEASE:
            releases.prune(model_dir, journal.keep, releases.served(model_dir))
        releases.stamp(
            model_dir, journal.pipeline, placed=[e.version] if journal.kind is Kind.RELEASE else []
        )
    fault("settled")
    if journal.remote:
        _mirror(repository, journal)
    problems = switch_all(journal.servers, {e.model: e.version for e in journal.entries})
    path(repository, journal.pipeline).unlink()
    return problems


def _mirror(repository: Path, journal: Journal) -> None:
    """The remote copy follows, every model of the pipeline (its manifest lists them all)."""
    from deploy.pipeline.publish.readback import published_models
    from deploy.serving.release_mirror import mirror

    models = published_models(repository, journal.pipeline) or [e.model for e in journal.entries]
    mirror(repository, journal.remote or "", journal.pipeline, models)


def _revert(repository: Path, journal: Journal) -> None:
    for e in journal.entries:
        model_dir = repository / e.model
        placed = model_dir / str(e.version)
        if placed.is_dir() and releases.file_digests(placed) == ReleaseRecord.from_json(e.record).files:
            _remove(placed)
        releases.sweep(model_dir)
        if e.before is None:
            if model_dir.is_dir() and not releases.versions(model_dir):
                _remove(model_dir)
            continue
        atomic_write_text(model_dir / CONFIG_FILE, e.before)
        releases.stamp(model_dir, journal.pipeline)
    path(repository, journal.pipeline).unlink()


def _remove(target: Path) -> None:
    """Out of the namespace a server reads by one rename, then deleted."""
    aside = releases.staging(target.parent)
    faults.rename(target, aside)
    shutil.rmtree(aside, ignore_errors=True)


def recover(repository: Path) -> list[str]:
    """Completes a publish killed amid its renames (from its staging, so before the sweep),
    removes what killed commands left (temp files, staging: pipeline/store/leftovers.py),
    then reverts or completes every journal a killed release or rollback left in
    `repository`; returns what it did about journals, one line each ([] when none)."""
    from deploy.pipeline.publish import publish_journal
    from deploy.pipeline.store.leftovers import sweep

    said = publish_journal.complete(repository)
    sweep(repository)
    for found in sorted(repository.glob(f".deploy-*{SUFFIX}")) if repository.is_dir() else []:
        said.append(_recover(repository, found))
    return said


def _recover(repository: Path, found: Path) -> str:
    from deploy.pipeline.errors import EnvError

    try:
        journal = Journal.from_json(found.read_text())
    except (OSError, ValueError, SchemaMismatch) as exc:
        raise EnvError(
            f"{found}: an interrupted release's journal that cannot be read ({exc}); "
            "look at the repository, then remove the journal"
        ) from exc
    what = f"{journal.kind.value} of '{journal.pipeline}' ({journal.said()})"
    if journal.step is Step.PLACING:
        _revert(repository, journal)
        return f"reverted the interrupted {what}: it serves what it did"
    problems = _complete(repository, journal)
    told = f"; servers that did not switch: {'; '.join(problems)}" if problems else ""
    return f"completed the interrupted {what}{told}"


def releasing(
    repository: Path,
    pipeline: str,
    keep: int,
    placed: Sequence[tuple[Path, Path, ReleaseRecord]],
    servers: Sequence[str],
    remote: str | None = None,
) -> list[str]:
    """Releases `placed` (model dir, candidate version dir, record) as one transaction,
    mirrored to `remote` before the `servers` are told; returns the servers that did not
    switch."""
    entries = [entry(model_dir, candidate, record) for model_dir, candidate, record in placed]
    return commit(repository, Journal(pipeline, keep, entries, list(servers), remote)) if entries else []


def rolling_back(
    repository: Path,
    pipeline: str,
    moves: Sequence[tuple[str, int, str, dict[str, str | None]]],
    servers: Sequence[str],
    remote: str | None = None,
) -> list[str]:
    """Points each model (model, version, its new config, the marks of its records) at a
    kept version as one transaction: the journal is written first, whole, then each
    config is replaced and each record marked; a kill anywhere is completed by the next
    command. Returns the servers that did not switch."""
    entries = [
        JournalEntry(model, version, "", config, _config_of(repository / model), "", marks)
        for model, version, config, marks in moves
    ]
    journal = Journal(pipeline, 0, entries, list(servers), remote, Step.SWITCHING, Kind.ROLLBACK)
    with _whole():
        atomic_write_text(path(repository, pipeline), journal.to_json())
        fault("journal")
        _switch(repository, journal)
    return _settle(repository, journal)


def _config_of(model_dir: Path) -> str | None:
    config = model_dir / CONFIG_FILE
    return config.read_text() if config.is_file() else None
