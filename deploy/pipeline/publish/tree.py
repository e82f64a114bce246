"""Publishes a tree artifact out of the cache to a directory or object storage: one protocol.

The tree is the Triton model repository; the destination a local directory or an fsspec
URL (s3://, gs://, az://, file://; Triton reads such repositories directly).

What is published is what was verified, and a repository is replaced whole or not at all:

  1. A model dir whose `.deploy.json` stamp matches (same pipeline, same file digests) and
     whose files are all there (same size, and the stat the cache's memo recorded: ctime
     changes with any write; else a rehash) is left alone. A file changed behind deploy's
     back is found, the model restored from the cache, and said (`Published.repaired`).
  2. Every model to (re)write is staged first, complete, beside the repository (same file
     system), each file's digest checked as it is written: a full disk, a kill, a corrupt
     cache object all stop the publish here, with the repository as it was.
  3. Then each staged model dir is renamed into place (the old one renamed aside, then
     removed), stale ones of this pipeline deleted, and `.deploy-<pipeline>.json` written
     (the models `complete()` checks): under the repository's lock, with Ctrl-C and SIGTERM
     held until the manifest is written, and a journal written before the first rename that
     the next command completes after a SIGKILL amid them (publish_journal.py).

On object storage (no rename) a model's files are copied into place, version files before
the model's root files, then the stamp, each model whole before the next; the source
objects are verified before they are sent; the warm check is by size. Any storage error is an EnvError naming the destination."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from deploy.pipeline.errors import EnvError
from deploy.pipeline.graph.hashing import atomic_write_text, digest_file
from deploy.pipeline.process import stopping
from deploy.pipeline.publish import publish_journal
from deploy.pipeline.publish.publish_journal import PublishJournal
from deploy.pipeline.publish.stamp import SCHEMA, STAMP, Files, Stamp, manifest_name
from deploy.pipeline.store.objects import Output, Store
from deploy.pipeline.store.once import Once, linkable


@dataclass(frozen=True)
class Destination:
    """Where a repository is published: a file system and the repository's root in it."""

    fs: Any  # an fsspec AbstractFileSystem
    root: str
    local: bool  # renames are atomic: a staged model dir is renamed into place


@dataclass
class Published:
    """What a publish did: the model dirs it wrote, and those it found changed behind
    deploy's back (model -> the files that differed), which it restored."""

    written: list[str] = field(default_factory=list)
    repaired: dict[str, list[str]] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)  # every model dir of the tree


@dataclass(frozen=True)
class Verification:
    """What the manifest says of a publish: the stages that verified it ([]: none) and the
    tree's digest (what a failed smoke names as kept; no time: two agents publishing one
    tree write the same bytes)."""

    by: tuple[str, ...] = ()
    tree: str = ""
    unchecked: tuple[str, ...] = ()  # models published that its verifiers could not check


def publish(
    store: Store, output: Output, dest: Path | str, pipeline: str, verified: Verification = Verification()
) -> Published:
    """Makes `dest/<model>` match the tree; the manifest says which stages verified it."""
    models = models_of(store, output)
    try:
        if isinstance(dest, Path):
            return _publish_here(store, dest, models, pipeline, verified)
        where = destination(dest)
        done = Published(
            [m for m, files in models.items() if _sync(where, m, files, store, pipeline)], models=list(models)
        )
        _remove_stale(where, pipeline, keep=set(models))
        write_manifest(where, pipeline, models, verified)
        return done
    except EnvError:
        raise
    except Exception as exc:  # every storage backend has its own errors; all mean the same here
        raise EnvError(f"publishing the repository to {dest} failed: {type(exc).__name__}: {exc}") from exc


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


def models_of(store: Store, output: Output) -> dict[str, Files]:
    """Model dir -> its files (path inside the model dir -> digest, size)."""
    models: dict[str, Files] = {}
    for rel, meta in store.tree_manifest(output.digest).items():
        top, _, rest = rel.partition("/")
        models.setdefault(top, {})[rest] = (meta.digest, meta.size)
    return models


def in_order(files: Mapping[str, object]) -> list[str]:
    """Files in subdirectories (a model's versions) first, the model dir's own files last."""
    return sorted(files, key=lambda rel: ("/" not in rel, rel))


# -- a local repository: pathlib for the warm check, fsspec's calls for the writes ----------------
def _publish_here(
    store: Store, dest: Path, models: dict[str, Files], pipeline: str, verified: Verification
) -> Published:
    from deploy.pipeline.store import locks

    with locks.repository(dest):  # another run's publish, a release or a rollback: after it, not amid it
        return _publish_locked(store, dest, models, pipeline, verified)


def _publish_locked(
    store: Store, dest: Path, models: dict[str, Files], pipeline: str, verified: Verification
) -> Published:
    from deploy.pipeline.store.leftovers import sweep

    publish_journal.complete(dest)  # a publish killed amid its renames: finished from its staging
    sweep(dest)  # a killed command's temp files and staging: gone before any stamp is read
    done = Published(models=list(models))
    for model, files in models.items():
        altered = _altered(store, dest / model, Stamp(pipeline, files))
        if altered is None:
            continue
        done.written.append(model)
        if altered:
            done.repaired[model] = altered
    stale = _stale_here(dest, pipeline, set(models))
    if (
        not done.written
        and not stale
        and _manifest_record(dest, pipeline) == (sorted(models), sorted(verified.by))
    ):
        return done  # the common warm run: stats only, no fsspec import
    where = destination(dest)
    settle = partial(_settle, where, pipeline, models, verified)
    record = manifest_record(pipeline, models, verified)
    journal = partial(PublishJournal, pipeline, stale=stale, manifest=record)
    _stage_and_swap(where, dest, {m: models[m] for m in done.written}, store, pipeline, (journal, settle))
    store.memo.save()
    return done


def _altered(store: Store, model_dir: Path, stamp: Stamp) -> list[str] | None:
    """None: in place as stamped. Else the files found changed behind deploy's back
    ([] when the model is simply absent, another version, or another pipeline's)."""
    if _read_stamp_here(model_dir / STAMP) != stamp:
        return []
    changed = [
        rel for rel, (digest, size) in stamp.files.items() if not intact(store, model_dir / rel, digest, size)
    ]
    return changed or None


def intact(store: Store, path: Path, digest: str, size: int) -> bool:
    try:
        if path.stat().st_size != size:
            return False
    except OSError:
        return False
    if store.memo.matches(path) and store.memo.known(path) == digest:
        return True  # not written to since deploy wrote it (ctime is the kernel's)
    if digest_file(path) != digest:
        return False
    store.memo.remember(path, digest)
    return True


def _settle(where: Destination, pipeline: str, models: dict[str, Files], verified: Verification) -> None:
    _remove_stale(where, pipeline, keep=set(models))
    write_manifest(where, pipeline, models, verified)


def _stage_and_swap(
    where: Destination,
    dest: Path,
    models: dict[str, Files],
    store: Store,
    pipeline: str,
    then: tuple[Callable[..., PublishJournal], Callable[[], None]],
) -> None:
    """Every model staged and verified beside the repository, then renamed in and `settle`d:
    a failure before the renames leaves the repository as it was; a kill amid them, a
    journal the next command completes."""
    staging = dest.parent / f".{dest.name}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    once = Once()  # a file two models share (onnx and python serve one model.onnx) is held once
    journal, settle = then
    try:
        for model, files in models.items():
            _stage(where, staging / model, files, store, pipeline, once)
        dest.mkdir(parents=True, exist_ok=True)
        with stopping.deferred():  # Ctrl-C or SIGTERM: once the publish is whole, never amid it
            written = publish_journal.begin(dest, journal(staging=str(staging), models=list(models)))
            for model in models:
                publish_journal.swap(staging, dest, model)
            settle()
            written.unlink()
        for model, files in models.items():  # the stats the warm check will trust
            for rel, (digest, _) in files.items():
                store.memo.remember(dest / model / rel, digest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _stage(
    where: Destination, model_dir: Path, files: Files, store: Store, pipeline: str, once: Once
) -> None:
    for rel in in_order(files):
        target, digest = model_dir / rel, files[rel][0]
        target.parent.mkdir(parents=True, exist_ok=True)
        write = partial(where.fs.put_file, str(store.object_path(digest)), str(target))
        if once.place(digest, target, write, linkable(rel, files)):
            continue  # the file already staged and checked, under another name
        if digest_file(target) != digest:  # a cache object corrupted, or the write
            raise EnvError(
                f"publishing {model_dir.name}/{rel}: the written file does not match its digest "
                f"{digest[:12]} (run `deploy cache verify`; the repository was left as it was)"
            )
    where.fs.pipe_file(str(model_dir / STAMP), Stamp(pipeline, files).to_json().encode())


def _read_stamp_here(path: Path) -> Stamp | None:
    try:
        return Stamp.from_json(path.read_bytes())
    except OSError:
        return None


def _stale_here(dest: Path, pipeline: str, keep: set[str]) -> list[str]:
    found = []
    for stamp_path in dest.glob(f"*/{STAMP}"):
        stamp = _read_stamp_here(stamp_path)
        if stamp is not None and stamp.pipeline == pipeline and stamp_path.parent.name not in keep:
            found.append(stamp_path.parent.name)
    return found


# -- the repository's list of a pipeline's models -----------------------------------------------
def manifest_record(pipeline: str, models: Iterable[str], verified: Verification) -> dict[str, object]:
    """The models, the stages that verified them before they were published ([]: unverified)
    and the tree's digest."""
    return {
        "schema": SCHEMA,
        "pipeline": pipeline,
        "models": sorted(models),
        "verified_by": sorted(verified.by),
        "unverified": sorted(verified.unchecked),
        "tree": verified.tree,
    }


def write_manifest(
    where: Destination, pipeline: str, models: Iterable[str], verified: Verification = Verification()
) -> None:
    """Written last, and only when it changes (a warm run writes nothing)."""
    path = f"{where.root}/{manifest_name(pipeline)}"
    record = manifest_record(pipeline, models, verified)
    try:
        found = json.loads(where.fs.cat_file(path))
        if {k: found.get(k) for k in record} == record:
            return
    except (OSError, ValueError, AttributeError):
        pass
    text = json.dumps(record, indent=1)
    if where.local:  # a kill mid-write must leave the old manifest or the new one, whole
        atomic_write_text(Path(path), text)
    else:
        where.fs.pipe_file(path, text.encode())


def write_manifest_here(
    dest: Path, pipeline: str, models: list[str], verified: Verification = Verification()
) -> None:
    """The pipeline's manifest in a local repository, for a stage that publishes its own
    way (release: versions beside the deployed ones); written as write_manifest writes it."""
    write_manifest(destination(dest), pipeline, models, verified)


# -- object storage: model by model -----------------------------------------------------------
def _sync(where: Destination, model: str, files: Files, store: Store, pipeline: str) -> bool:
    stamp = Stamp(pipeline, files)
    target = f"{where.root}/{model}"
    if _current(where, target, stamp):
        return False
    _verify_sources(store, model, files)
    staging = f"{where.root}/.{model}.staging-{uuid.uuid4().hex}"
    try:
        for rel in in_order(files):
            where.fs.put_file(str(store.object_path(files[rel][0])), f"{staging}/{rel}")
        where.fs.pipe_file(f"{staging}/{STAMP}", stamp.to_json().encode())
        _copy_in_place(where, staging, target, [*in_order(files), STAMP])
    finally:
        if where.fs.exists(staging):
            where.fs.rm(staging, recursive=True)
    return True


def _verify_sources(store: Store, model: str, files: Files) -> None:
    """What is sent is what was verified: each cache object rehashed before upload."""
    for rel, (digest, size) in files.items():
        problem = store.object_problem(digest, size)
        if problem:
            raise EnvError(f"publishing {model}/{rel}: {problem} (run `deploy cache verify`)")


def _copy_in_place(where: Destination, staging: str, target: str, order: list[str]) -> None:
    for rel in order:
        where.fs.copy(f"{staging}/{rel}", f"{target}/{rel}")
    for path in where.fs.find(target):
        if path[len(target) + 1 :] not in order:
            where.fs.rm_file(path)


def _current(where: Destination, target: str, stamp: Stamp) -> bool:
    """Same stamp and every file present with its recorded size: nothing to copy."""
    found = _read_stamp(where, f"{target}/{STAMP}")
    return found == stamp and all(
        _size(where, f"{target}/{rel}") == size for rel, (_, size) in stamp.files.items()
    )


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


def _remove_stale(where: Destination, pipeline: str, keep: set[str]) -> None:
    """Drops model dirs this pipeline published earlier but no longer produces."""
    for stamp_path in where.fs.glob(f"{where.root}/*/{STAMP}"):
        model_dir = stamp_path.rsplit("/", 1)[0]
        stamp = _read_stamp(where, stamp_path)
        if stamp is not None and stamp.pipeline == pipeline and model_dir.rsplit("/", 1)[-1] not in keep:
            where.fs.rm(model_dir, recursive=True)


def _manifest_record(dest: Path, pipeline: str) -> tuple[list[str], list[str]] | None:
    """(models, verified_by) as the local manifest lists them."""
    try:
        found = json.loads((dest / manifest_name(pipeline)).read_text())
        return list(found["models"]), list(found.get("verified_by") or [])
    except (OSError, ValueError, KeyError, TypeError):
        return None
