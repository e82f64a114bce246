"""Copies published tree artifacts (the Triton model repository) out of the cache.

Each top-level directory of the tree is one Triton model. It is replaced as a whole,
through a temp dir and a rename, and stamped with `.deploy.json` so that a rerun can
tell cheaply that it is already current, and which directories a pipeline owns.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pipeline.store import Output, Store

STAMP = ".deploy.json"


def publish_tree(store: Store, output: Output, dest: Path, pipeline: str) -> list[str]:
    """Makes `dest/<model>` match the tree; returns the model dirs that were (re)written."""
    models = models_of(store, output)
    written = [m for m, files in models.items() if _sync_model(store, dest / m, files, pipeline)]
    _remove_stale(dest, pipeline, keep=set(models))
    return written


def models_of(store: Store, output: Output) -> dict[str, dict[str, dict[str, object]]]:
    """Model dir -> its files (path inside the model dir -> digest, size)."""
    models: dict[str, dict[str, dict[str, object]]] = {}
    for rel, meta in store.tree_manifest(output.digest).items():
        top, _, rest = rel.partition("/")
        models.setdefault(top, {})[rest] = meta
    return models


def stamp_of(files: dict[str, dict[str, object]], pipeline: str) -> dict[str, Any]:
    """What `.deploy.json` says: which pipeline owns the model dir, and its files."""
    return {"pipeline": pipeline, "files": {k: [v["digest"], v["size"]] for k, v in sorted(files.items())}}


def _sync_model(store: Store, target: Path, files: dict[str, dict[str, object]], pipeline: str) -> bool:
    stamp = stamp_of(files, pipeline)
    if _current(target, stamp):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    # mkdtemp makes it 0700: a tritonserver running as another user (a container's
    # --user, runAsNonRoot, NFS) could not read it. Give it the modes mkdir would.
    tmp.chmod(0o777 & ~_umask())
    for rel, meta in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(store.object_path(str(meta["digest"])), tmp / rel)
    (tmp / STAMP).write_text(json.dumps(stamp, indent=1))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return True


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it
    os.umask(mask)
    return mask


def _current(target: Path, stamp: dict[str, Any]) -> bool:
    """Same stamp and every file present with its recorded size: nothing to copy."""
    try:
        if json.loads((target / STAMP).read_text()) != stamp:
            return False
    except (OSError, ValueError):
        return False
    files = stamp["files"]
    assert isinstance(files, dict)
    return all(
        (target / rel).is_file() and (target / rel).stat().st_size == meta[1] for rel, meta in files.items()
    )


def _remove_stale(dest: Path, pipeline: str, keep: set[str]) -> None:
    """Drops model dirs this pipeline published earlier but no longer produces."""
    for stamp_path in dest.glob(f"*/{STAMP}"):
        try:
            owner = json.loads(stamp_path.read_text()).get("pipeline")
        except (OSError, ValueError):
            continue
        if owner == pipeline and stamp_path.parent.name not in keep:
            shutil.rmtree(stamp_path.parent, ignore_errors=True)
