"""A local publish's renames as one step a kill cannot split: the journal
(`.deploy-<pipeline>.publish-journal` at the repository's root) is written once every
model is staged and checked, before the first rename, and removed after the manifest.

A SIGKILL between two renames (Ctrl-C and SIGTERM are held there; SIGKILL cannot be) left
one model from the new publish and another from the old, and `deploy serve` served that.
Now the next command that touches the repository (a run's publish, `serve`, `releases`,
`rollback`, a release) completes the journal first: every staged model is verified, so
finishing is always right, and the staged copies are still there (the staging dir is
named by the dead process's pid and swept only after this)."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from deploy.pipeline.graph.hashing import atomic_write_text
from deploy.pipeline.process import faults
from deploy.pipeline.publish.stamp import manifest_name

SCHEMA = 1
SUFFIX = ".publish-journal"


@dataclass(frozen=True)
class PublishJournal:
    """What a publish was doing when it renamed: the staged models to rename in, the
    stale model dirs to remove, and the manifest record to write last."""

    pipeline: str
    staging: str  # the dir beside the repository holding each staged model dir
    models: list[str]  # staged, to be renamed in (in this order)
    stale: list[str]  # model dirs of this pipeline the new tree no longer has
    manifest: dict[str, object]
    schema: int = SCHEMA

    @classmethod
    def from_json(cls, text: str) -> PublishJournal:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a publish journal of schema {SCHEMA}")
        return cls(**{k: data[k] for k in ("pipeline", "staging", "models", "stale", "manifest")})


def path(repository: Path, pipeline: str) -> Path:
    return repository / f".deploy-{pipeline}{SUFFIX}"


def begin(repository: Path, journal: PublishJournal) -> Path:
    """Writes the journal (atomically): from here the publish is completed, never undone."""
    written = path(repository, journal.pipeline)
    atomic_write_text(written, json.dumps(asdict(journal), indent=1))
    return written


def complete(repository: Path) -> list[str]:
    """Completes every publish a killed command left half renamed in `repository`; one line
    each ([] when none). Run under the repository's lock, before the staging is swept."""
    from deploy.pipeline.errors import EnvError

    said = []
    for found in sorted(repository.glob(f".deploy-*{SUFFIX}")) if repository.is_dir() else []:
        try:
            journal = PublishJournal.from_json(found.read_text())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EnvError(
                f"{found}: an interrupted publish's journal that cannot be read ({exc}); "
                "remove it, then `deploy run` publishes the repository again"
            ) from exc
        said.append(_complete(repository, journal))
        found.unlink()
    return said


def _complete(repository: Path, journal: PublishJournal) -> str:
    staging = Path(journal.staging)
    lost = [m for m in journal.models if not swap(staging, repository, m)]
    for model in journal.stale:
        shutil.rmtree(repository / model, ignore_errors=True)
    atomic_write_text(repository / manifest_name(journal.pipeline), json.dumps(journal.manifest, indent=1))
    shutil.rmtree(staging, ignore_errors=True)
    done = f"completed the interrupted publish of '{journal.pipeline}' ({len(journal.models)} model(s))"
    if lost:
        return f"{done}, except {', '.join(lost)}: its staged copy is gone; `deploy run` publishes it again"
    return done


def swap(staging: Path, repository: Path, model: str) -> bool:
    """Renames `staging/model` in place of `repository/model`, the old one renamed aside to
    `staging/model.retired` first and then removed; each step is skipped where a killed
    publish already made it. False: neither the staged copy nor the model is there."""
    staged, target, retired = staging / model, repository / model, staging / f"{model}.retired"
    if staged.is_dir():
        if target.exists():
            shutil.rmtree(retired, ignore_errors=True)
            faults.rename(target, retired)
        faults.rename(staged, target)
    shutil.rmtree(retired, ignore_errors=True)
    return target.is_dir()
