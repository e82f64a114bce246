"""Placing a released version into the repository, and settling a model dir after it:
the model's config, pruning, and the stamp a server check reads (`deploy serve` and smoke
check a repository against them before starting a server). Settling is idempotent and
also runs for an unchanged model, so a release killed after its version was placed is
finished by the next run."""

from __future__ import annotations

from pathlib import Path

from deploy.pipeline.hashing import atomic_write_text
from deploy.serving import releases
from deploy.serving.releases import ReleaseRecord

CONFIG_FILE = "config.pbtxt"


def release(model_dir: Path, candidate: Path, record: ReleaseRecord, keep: int) -> Path:
    """Places `candidate` (a version dir) as version `record.version`, then settles the
    model dir with the candidate's config whole (its version_policy too: Triton's default
    serves the new version). A new version dir appears whole (one rename); a server
    polling the repository loads it before it unloads the older one (Triton's model
    lifecycle)."""
    releases.sweep(model_dir)
    placed = releases.place(model_dir, candidate, record)
    config = candidate.parent / CONFIG_FILE
    _write(model_dir / CONFIG_FILE, config.read_text())
    settle(model_dir, config, keep, record.pipeline)
    return placed


def settle(model_dir: Path, config: Path, keep: int, pipeline: str) -> None:
    """The model's config as the candidate's, keeping the version_policy it has (a
    rollback's), then pruning to `keep` versions and renewing the stamp."""
    releases.sweep(model_dir)
    _write(model_dir / CONFIG_FILE, releases.with_policy_of(model_dir / CONFIG_FILE, config.read_text()))
    releases.prune(model_dir, keep, releases.served(model_dir))
    releases.stamp(model_dir, pipeline)


def _write(target: Path, text: str) -> None:
    if not target.is_file() or target.read_text() != text:
        atomic_write_text(target, text)
