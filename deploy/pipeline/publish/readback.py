"""Reading back what a publish left: whether a local repository holds exactly a tree,
what its last publish was, which models it listed, and what keeps a published repository
from being served whole."""

from __future__ import annotations

import json
from pathlib import Path

from deploy.pipeline.publish.tree import (
    STAMP,
    Stamp,
    _manifest_record,
    _read_stamp_here,
    _size,
    destination,
    manifest_name,
    models_of,
)
from deploy.pipeline.store.objects import Output, Store


def holds(store: Store, output: Output, dest: Path, pipeline: str) -> list[str] | None:
    """The verifiers of the publish a local repository holds when it holds exactly this
    tree (every model stamped with these files, the manifest listing them), else None."""
    found = _manifest_record(dest, pipeline)
    return found[1] if found is not None and found[1] and holds_tree(store, output, dest, pipeline) else None


def holds_tree(store: Store, output: Output, dest: Path, pipeline: str) -> bool:
    """A local repository holds exactly this tree, verified or not."""
    models = models_of(store, output)
    found = _manifest_record(dest, pipeline)
    if found is None or found[0] != sorted(models):
        return False
    return all(_read_stamp_here(dest / m / STAMP) == Stamp(pipeline, files) for m, files in models.items())


def last_publish(dest: Path, pipeline: str) -> str:
    """What a local repository holds of the pipeline, in words: its last publish (its tree,
    verified by what), or that there is none."""
    try:
        found = json.loads((dest / manifest_name(pipeline)).read_text())
    except (OSError, ValueError):
        return f"{dest} holds nothing of '{pipeline}'"
    verified, unchecked = found.get("verified_by") or [], found.get("unverified") or []
    how = f"verified by {', '.join(verified)}" if verified else "unverified"
    how += (
        f" except {', '.join(unchecked)} (its server could not load them)" if verified and unchecked else ""
    )
    tree = f"tree {str(found['tree'])[:12]}: " if found.get("tree") else ""
    return f"{dest} keeps the last publish ({tree}{', '.join(found.get('models', []))}; {how})"


def published_models(dest: Path, pipeline: str) -> list[str] | None:
    """The models the pipeline's last publish into a local repository listed; None when
    it never published there."""
    return _manifest_here(dest, pipeline)


def _manifest_here(dest: Path, pipeline: str) -> list[str] | None:
    try:
        return list(json.loads((dest / manifest_name(pipeline)).read_text())["models"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def complete(dest: Path | str, pipeline: str) -> list[str]:
    """What keeps a published repository from being served as the pipeline's whole:
    models its manifest lists that are missing, unstamped, or missing a file (sizes only:
    cheap enough before every server start). [] when complete."""
    where = destination(dest) if isinstance(dest, str) else None
    read = (
        (lambda rel: where.fs.cat_file(f"{where.root}/{rel}"))
        if where
        else (lambda rel: (dest / rel).read_bytes())
    )
    size = (
        (lambda rel: _size(where, f"{where.root}/{rel}")) if where else (lambda rel: _file_size(dest / rel))
    )
    try:
        listed = list(json.loads(read(manifest_name(pipeline)))["models"])
    except (OSError, ValueError, KeyError, TypeError):
        return [f"no {manifest_name(pipeline)}: the last publish of '{pipeline}' never finished"]
    problems = []
    for model in listed:
        try:
            stamp = Stamp.from_json(read(f"{model}/{STAMP}"))
        except OSError:
            stamp = None
        if stamp is None:
            problems.append(f"{model}: missing, or without its {STAMP}")
            continue
        problems += [
            f"{model}/{rel}: missing or resized"
            for rel, (_, n) in stamp.files.items()
            if size(f"{model}/{rel}") != n
        ]
    return problems


def _file_size(path: Path) -> int | None:
    return path.stat().st_size if path.is_file() else None
