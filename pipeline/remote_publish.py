"""Publishes a Triton model repository to object storage (s3://, gs://, az://; Triton
reads such repositories directly) or a shared directory (file://), through fsspec.

Per model dir, so that a server polling the repository never loads a half-written
model: the files are uploaded under a staging prefix first (`.staging-<id>/`), copied
into place (a server-side copy on S3), `config.pbtxt` last, then the `.deploy.json`
stamp; files of an earlier publish that the new model no longer has are removed, and
model dirs this pipeline published earlier but no longer produces are deleted. A model
whose stamp already matches is not touched. Credentials: the storage library's standard
environment / profile, never logged.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from pipeline.errors import EnvError
from pipeline.publish import STAMP, models_of, publish_tree, stamp_of
from pipeline.store import Output, Store

CONFIG = "config.pbtxt"


def publish(store: Store, output: Output, dest: Path | str, pipeline: str) -> None:
    """To a local directory (pipeline/publish.py), or to object storage (a URL)."""
    if isinstance(dest, Path):
        publish_tree(store, output, dest, pipeline)
    else:
        publish_remote(store, output, dest, pipeline)


def publish_remote(store: Store, output: Output, url: str, pipeline: str) -> list[str]:
    """Makes `url/<model>` match the tree; returns the model dirs (re)written."""
    from fsspec.core import url_to_fs

    try:
        fs, root = url_to_fs(url, **_options(url))
        root = root.rstrip("/")
        models = models_of(store, output)
        written = [m for m, files in models.items() if _sync(fs, root, m, files, store, pipeline)]
        _remove_stale(fs, root, pipeline, keep=set(models))
    except Exception as exc:  # every storage backend has its own errors; all mean the same here
        raise EnvError(f"publishing the repository to {url} failed: {type(exc).__name__}: {exc}") from exc
    return written


def _options(url: str) -> dict[str, Any]:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return {"endpoint_url": endpoint} if url.startswith("s3://") and endpoint else {}


def _sync(
    fs: Any, root: str, model: str, files: dict[str, dict[str, object]], store: Store, pipeline: str
) -> bool:
    stamp = stamp_of(files, pipeline)
    target = f"{root}/{model}"
    if _remote_stamp(fs, target) == stamp:
        return False
    staging = f"{root}/.staging-{uuid.uuid4().hex}/{model}"
    order = sorted(files, key=lambda rel: rel == CONFIG)  # the config last
    try:
        for rel in order:
            fs.put_file(str(store.object_path(str(files[rel]["digest"]))), f"{staging}/{rel}")
        for rel in order:
            fs.copy(f"{staging}/{rel}", f"{target}/{rel}")
        fs.pipe_file(f"{target}/{STAMP}", json.dumps(stamp, indent=1).encode())
    finally:
        if fs.exists(staging.rsplit("/", 1)[0]):
            fs.rm(staging.rsplit("/", 1)[0], recursive=True)
    _remove_extra(fs, target, set(files) | {STAMP})
    return True


def _remote_stamp(fs: Any, target: str) -> Any:
    try:
        return json.loads(fs.cat_file(f"{target}/{STAMP}"))
    except (FileNotFoundError, ValueError):
        return None


def _remove_extra(fs: Any, target: str, keep: set[str]) -> None:
    for path in fs.find(target):
        if path[len(target) + 1 :] not in keep:
            fs.rm_file(path)


def _remove_stale(fs: Any, root: str, pipeline: str, keep: set[str]) -> None:
    """Drops model dirs this pipeline published earlier but no longer produces."""
    for stamp_path in fs.glob(f"{root}/*/{STAMP}"):
        model_dir = stamp_path.rsplit("/", 1)[0]
        try:
            owner = json.loads(fs.cat_file(stamp_path)).get("pipeline")
        except (FileNotFoundError, ValueError):
            continue
        if owner == pipeline and model_dir.rsplit("/", 1)[-1] not in keep:
            fs.rm(model_dir, recursive=True)
