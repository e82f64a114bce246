"""Placing a released version into the repository, and the stamps a server check reads
(`deploy serve` and smoke check a repository against them before starting a server)."""

from __future__ import annotations

from pathlib import Path

from deploy.pipeline.hashing import atomic_write_text
from deploy.pipeline.publish import write_manifest_here
from deploy.serving import releases
from deploy.serving.releases import ReleaseRecord

CONFIG_FILE = "config.pbtxt"


def release(model_dir: Path, candidate: Path, record: ReleaseRecord, keep: int) -> Path:
    """Places `candidate` (a version dir) as version `record.version`, then the model's
    config where it changed, then prunes to `keep` versions. A new version dir appears
    whole (one rename); a server polling the repository loads it before it unloads the
    older one (Triton's model lifecycle)."""
    releases.sweep(model_dir)
    placed = releases.place(model_dir, candidate, record)
    _config(model_dir, candidate.parent / CONFIG_FILE)
    releases.prune(model_dir, keep, releases.served(model_dir))
    releases.stamp(model_dir, record.pipeline)
    return placed


def _config(model_dir: Path, config: Path) -> None:
    target = model_dir / CONFIG_FILE
    if not target.is_file() or target.read_bytes() != config.read_bytes():
        atomic_write_text(target, config.read_text())


def manifest(repository: Path, pipeline: str, models: list[str]) -> None:
    write_manifest_here(repository, pipeline, models)
