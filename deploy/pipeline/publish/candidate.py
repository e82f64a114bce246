"""A laid-out repository tree copied to object storage as a candidate: written as a
publish writes it, for a server to read before the tree is verified."""

from __future__ import annotations

from pathlib import Path

from deploy.pipeline.graph.hashing import digest_file
from deploy.pipeline.publish.tree import STAMP, Stamp, destination, in_order, write_manifest


def models_here(tree: Path) -> list[str]:
    """The model dirs of a repository tree (a cache artifact laid out)."""
    return sorted(p.name for p in tree.iterdir() if p.is_dir() and not p.name.startswith("."))


def copy_tree(tree: Path, dest: str, pipeline: str) -> list[str]:
    """A laid-out repository tree copied to object storage as a publish writes it (each
    model's files, versions before its root files, its stamp, then the manifest): a
    candidate for a server to read before it is verified. Returns the models."""
    where = destination(dest)
    models = models_here(tree)
    for model in models:
        files = {
            str(p.relative_to(tree / model)): (digest_file(p), p.stat().st_size)
            for p in sorted((tree / model).rglob("*"))
            if p.is_file()
        }
        for rel in in_order(files):
            where.fs.put_file(str(tree / model / rel), f"{where.root}/{model}/{rel}")
        where.fs.pipe_file(f"{where.root}/{model}/{STAMP}", Stamp(pipeline, files).to_json().encode())
    write_manifest(where, pipeline, models)
    return models
