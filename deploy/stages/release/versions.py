"""Settling a model dir a release left unchanged: the model's config (keeping the
version_policy a rollback set), pruning, and the stamp a server check reads (`deploy
serve` and smoke check a repository against it before starting a server). New versions
are placed by serving.release_journal, one transaction for the pipeline."""

from __future__ import annotations

from pathlib import Path

from deploy.pipeline.graph.hashing import atomic_write_text
from deploy.serving import releases

CONFIG_FILE = "config.pbtxt"


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
