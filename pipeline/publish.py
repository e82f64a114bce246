"""Publishes a tree artifact out of the cache to a directory or object storage: one protocol.

The tree is the Triton model repository; the destination a local directory or an fsspec
URL (s3://, gs://, az://, file://; Triton reads such repositories directly).

Per model dir (each top-level directory of the tree), so that a server polling the
repository never loads a half-written model:
  1. a model whose `.deploy.json` stamp matches (same pipeline, same file digests) and
     whose files are all there with their sizes is left alone;
  2. otherwise its files are written under a hidden staging name beside it first;
  3. then put in place: on a local file system by renaming the old model dir aside and
     the staged one into its place, then removing the old one; on object storage (no
     rename) by copying each file into place, files in version subdirectories before
     the model's own root files (a server reads the model's config there, so it sees
     the new config only once the versions are in place), then the stamp, then
     removing files the new model no longer has;
  4. model dirs this pipeline published earlier but no longer produces are deleted;
     another pipeline's are kept.
Local directories and files get the modes mkdir and open give under the umask. Any
storage error is an EnvError naming the destination. Credentials: the storage library's
standard environment / profile, never logged."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EnvError
from pipeline.store import Output, Store

STAMP = ".deploy.json"
SCHEMA = 1


@dataclass(frozen=True)
class Stamp:
    """What `.deploy.json` says: which pipeline owns the model dir, and its files."""

    pipeline: str
    files: dict[str, tuple[str, int]]  # path inside the model dir -> (digest, size)
    schema: int = SCHEMA

    def to_json(self) -> str:
        files = {rel: [digest, size] for rel, (digest, size) in sorted(self.files.items())}
        return json.dumps({"schema": self.schema, "pipeline": self.pipeline, "files": files}, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> Stamp | None:
        """None for anything but a stamp of this schema (then the model is rewritten). A
        stamp without a schema is from before it had one: the same layout otherwise."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("schema", SCHEMA) != SCHEMA:
                return None
            files = {str(rel): (str(d), int(s)) for rel, (d, s) in data["files"].items()}
            return cls(str(data["pipeline"]), files)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


@dataclass(frozen=True)
class Destination:
    """Where a repository is published: a file system and the repository's root in it."""

    fs: Any  # an fsspec AbstractFileSystem
    root: str
    local: bool  # renames are atomic: a staged model dir is renamed into place


def publish(store: Store, output: Output, dest: Path | str, pipeline: str) -> list[str]:
    """Makes `dest/<model>` match the tree; returns the model dirs that were (re)written."""
    models = models_of(store, output)
    try:
        if isinstance(dest, Path) and _up_to_date_here(dest, models, pipeline):
            return []  # the common warm run: checked without importing fsspec
        where = destination(dest)
        written = [m for m, files in models.items() if _sync(where, m, files, store, pipeline)]
        _remove_stale(where, pipeline, keep=set(models))
    except Exception as exc:  # every storage backend has its own errors; all mean the same here
        raise EnvError(f"publishing the repository to {dest} failed: {type(exc).__name__}: {exc}") from exc
    return written


def destination(dest: Path | str) -> Destination:
    from fsspec.core import url_to_fs
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(dest, Path):
        return Destination(LocalFileSystem(auto_mkdir=True), str(dest.absolute()), local=True)
    fs, root = url_to_fs(dest, **_options(dest))
    if isinstance(fs, LocalFileSystem):  # file://: a directory after all
        return destination(Path(root))
    return Destination(fs, root.rstrip("/"), local=False)


def _options(url: str) -> dict[str, str]:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return {"endpoint_url": endpoint} if url.startswith("s3://") and endpoint else {}


def models_of(store: Store, output: Output) -> dict[str, dict[str, tuple[str, int]]]:
    """Model dir -> its files (path inside the model dir -> digest, size)."""
    models: dict[str, dict[str, tuple[str, int]]] = {}
    for rel, meta in store.tree_manifest(output.digest).items():
        top, _, rest = rel.partition("/")
        models.setdefault(top, {})[rest] = (meta.digest, meta.size)
    return models


def _sync(
    where: Destination, model: str, files: dict[str, tuple[str, int]], store: Store, pipeline: str
) -> bool:
    stamp = Stamp(pipeline, files)
    target = f"{where.root}/{model}"
    if _current(where, target, stamp):
        return False
    if where.local:  # (s3fs's makedirs would create a missing bucket: a typo should fail)
        where.fs.makedirs(where.root, exist_ok=True)
    staging = f"{where.root}/.{model}.staging-{uuid.uuid4().hex}"
    try:
        for rel in in_order(files):
            where.fs.put_file(str(store.object_path(files[rel][0])), f"{staging}/{rel}")
        where.fs.pipe_file(f"{staging}/{STAMP}", stamp.to_json().encode())
        _put_in_place(where, staging, target, [*in_order(files), STAMP])
    finally:
        if where.fs.exists(staging):
            where.fs.rm(staging, recursive=True)
    return True


def in_order(files: Mapping[str, object]) -> list[str]:
    """Files in subdirectories (a model's versions) first, the model dir's own files last."""
    return sorted(files, key=lambda rel: ("/" not in rel, rel))


def _put_in_place(where: Destination, staging: str, target: str, order: list[str]) -> None:
    if where.local:  # the old model stays whole until the staged one is renamed in
        retired = f"{staging}.retired"
        if where.fs.exists(target):
            where.fs.mv(target, retired, recursive=True)
        where.fs.mv(staging, target, recursive=True)
        if where.fs.exists(retired):
            where.fs.rm(retired, recursive=True)
        return
    for rel in order:
        where.fs.copy(f"{staging}/{rel}", f"{target}/{rel}")
    for path in where.fs.find(target):
        if path[len(target) + 1 :] not in order:
            where.fs.rm_file(path)


def _current(where: Destination, target: str, stamp: Stamp) -> bool:
    """Same stamp and every file present with its recorded size: nothing to copy."""
    return _matches(
        stamp, _read_stamp(where, f"{target}/{STAMP}"), lambda rel: _size(where, f"{target}/{rel}")
    )


def _matches(stamp: Stamp, found: Stamp | None, size_of: Callable[[str], int | None]) -> bool:
    return found == stamp and all(size_of(rel) == size for rel, (_, size) in stamp.files.items())


def _size(where: Destination, path: str) -> int | None:
    try:
        return int(where.fs.size(path))
    except OSError:  # FileNotFoundError included
        return None


def _read_stamp(where: Destination, path: str) -> Stamp | None:
    try:
        return Stamp.from_json(where.fs.cat_file(path))
    except OSError:
        return None


def _up_to_date_here(dest: Path, models: dict[str, dict[str, tuple[str, int]]], pipeline: str) -> bool:
    """The same check for a local repository, with pathlib: every model there as stamped,
    and no stale one of ours."""
    for stamp_path in dest.glob(f"*/{STAMP}"):
        stamp = _read_stamp_here(stamp_path)
        if stamp is not None and stamp.pipeline == pipeline and stamp_path.parent.name not in models:
            return False  # a stale model of ours to remove
    return all(
        _matches(Stamp(pipeline, files), _read_stamp_here(dest / model / STAMP), _sizer(dest / model))
        for model, files in models.items()
    )


def _read_stamp_here(path: Path) -> Stamp | None:
    try:
        return Stamp.from_json(path.read_bytes())
    except OSError:
        return None


def _sizer(model_dir: Path) -> Callable[[str], int | None]:
    def size_of(rel: str) -> int | None:
        path = model_dir / rel
        return path.stat().st_size if path.is_file() else None

    return size_of


def _remove_stale(where: Destination, pipeline: str, keep: set[str]) -> None:
    """Drops model dirs this pipeline published earlier but no longer produces."""
    for stamp_path in where.fs.glob(f"{where.root}/*/{STAMP}"):
        model_dir = stamp_path.rsplit("/", 1)[0]
        stamp = _read_stamp(where, stamp_path)
        if stamp is not None and stamp.pipeline == pipeline and model_dir.rsplit("/", 1)[-1] not in keep:
            where.fs.rm(model_dir, recursive=True)
