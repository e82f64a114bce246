"""A shared remote cache behind the local store: object storage (s3://, gs://, az://) or a
shared directory (file://, e.g. on NFS), through fsspec. The remote has the local store's
layout, `objects/ab/<sha256>` and `actions/ab/<key>.json`, so a file:// remote is a store.

Read-through: on a local miss the runner asks `pull(key)`; the entry is read, every
object it names is downloaded to a temp file and its sha256 checked before it enters the
local store, then the entry is committed locally. A remote object that does not match its
digest is never served: the key counts as a miss (the stage runs) and the object is
overwritten on the next push. Push: every object first, then the entries, so an entry is
never visible before its objects (an S3 PUT is visible whole or not at all; on a file://
remote each file is written under a temp name and renamed). Two agents pushing the same
key write the same objects (content-addressed) and each a complete entry: the last one
wins, and either is valid.

The remote is an accelerator, never a dependency: the first failure to reach it (network
down, credentials refused) prints one warning and the run goes on with the local cache.
Credentials come from the environment / profile the storage library reads (for S3:
AWS_ACCESS_KEY_ID, AWS_PROFILE, instance roles, …); none is ever logged or stored here.
fsspec and its backends are imported only when the remote is first used, so a fully
cached run never imports them.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.graph.hashing import digest_file
from deploy.pipeline.store.objects import Entry, Store
from deploy.spec.config import DeployConfig

# S3 behind a dead endpoint: fail in seconds, not after botocore's default retries.
S3_CLIENT = {"connect_timeout": 5, "read_timeout": 120, "retries": {"max_attempts": 2}}


@dataclass(frozen=True)
class RemoteSpec:
    url: str  # s3://bucket/prefix, gs://…, file:///shared/cache
    endpoint_url: str | None = None  # an S3-compatible server (MinIO, moto, Ceph)
    push: bool = True  # upload what runs build; False: read only

    def storage_options(self) -> dict[str, object]:
        """fsspec's keyword arguments for this URL's filesystem."""
        if not self.url.startswith("s3://"):
            return {}
        options: dict[str, object] = {"config_kwargs": S3_CLIENT}
        if self.endpoint_url:
            options["endpoint_url"] = self.endpoint_url
        return options


@dataclass(frozen=True)
class Transfer:
    """What one push or pull moved."""

    entries: int = 0
    objects: int = 0
    bytes: int = 0


@dataclass
class RemoteCache:
    spec: RemoteSpec
    warn: Callable[[str], None]
    down: str | None = None  # why the remote was given up for this process
    corrupt: set[str] = field(default_factory=set)  # remote objects to overwrite on push
    # Told of each object moved (done, total, what): the runner's progress, throttled.
    step: Callable[[int, int | None, str], None] | None = None
    _fs: Any = None  # an fsspec filesystem (fsspec ships no type information)
    _root: str = ""

    # -- plumbing -------------------------------------------------------------------
    def _files(self) -> tuple[Any, str]:
        if self._fs is None:
            from fsspec.core import url_to_fs

            self._fs, self._root = url_to_fs(self.spec.url, **self.spec.storage_options())
            self._root = self._root.rstrip("/")
        return self._fs, self._root

    def _path(self, rel: str) -> str:
        return f"{self._files()[1]}/{rel}"

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Any failure of the remote gives it up for the rest of the run, with one warning."""
        try:
            yield
        except Exception as exc:  # the storage stack raises many types; none may fail a build
            self.down = f"{type(exc).__name__}: {_first_line(exc)}"
            self.warn(
                f"remote cache {self.spec.url} unavailable while {doing} ({self.down}); "
                "continuing with the local cache only"
            )

    @property
    def usable(self) -> bool:
        return self.down is None

    # -- pull -----------------------------------------------------------------------
    def pull(self, key: str, store: Store) -> Entry | None:
        """The remote's entry for `key`, with every object downloaded and verified into the
        local store and the entry committed there; None on a miss or a bad object."""
        if not self.usable:
            return None
        found: Entry | None = None
        with self._guard(f"reading {key[:12]}"):
            found = self._pull(key, store)
        return found

    def _pull(self, key: str, store: Store) -> Entry | None:
        fs, _ = self._files()
        try:
            text = fs.cat_file(self._path(_entry_rel(key)))
        except FileNotFoundError:
            return None
        entry = Entry.from_json(json.loads(text))
        if entry.key != key:
            return None
        # Lazily: a tree's members are known only once its manifest object is here.
        count = 0
        for count, (digest, size) in enumerate(_objects(entry, store), start=1):
            self._moved(count - 1, None, f"downloading {entry.stage}")
            if not self._fetch(digest, size, store):
                return None
        self._moved(count, count, f"downloaded {entry.stage}")
        store.commit(entry, made_here=False)
        return entry

    def _fetch(self, digest: str, size: int | None, store: Store) -> bool:
        """Downloads one object unless the local store has it; False if it is corrupt."""
        if store.has_object(digest, size):
            return True
        tmp = store.work_root() / f"pull-{uuid.uuid4().hex}"
        try:
            self._files()[0].get_file(self._path(_object_rel(digest)), str(tmp))
            if digest_file(tmp) != digest:
                self.corrupt.add(digest)
                self.warn(f"remote cache object {digest[:12]} does not match its digest: ignored, rebuilding")
                return False
            store.adopt(tmp, digest)
            return True
        except FileNotFoundError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def _moved(self, done: int, total: int | None, what: str) -> None:
        if self.step is not None:
            self.step(done, total, what)

    # -- push -----------------------------------------------------------------------
    def push(self, entries: Iterable[Entry], store: Store) -> Transfer:
        """Uploads the entries' objects the remote lacks, then the entries."""
        done, entries = Transfer(), list(entries)
        if not self.usable or not entries:
            return done
        with self._guard("uploading"):
            done = self._push(entries, store)
        return done

    def _push(self, entries: list[Entry], store: Store) -> Transfer:
        fs, _ = self._files()
        objects = dict.fromkeys(d for e in entries for d, _ in _objects(e, store))
        sent = [d for d in objects if d in self.corrupt or not fs.exists(self._path(_object_rel(d)))]
        for index, digest in enumerate(sent):
            self._moved(index, len(sent), "uploading")
            self._put(store.object_path(digest), _object_rel(digest))
        self._moved(len(sent), len(sent), "uploaded")
        self.corrupt.difference_update(sent)
        for entry in entries:  # last: every object it names is already there
            tmp = store.work_root() / f"push-{uuid.uuid4().hex}.json"
            tmp.write_text(json.dumps(entry.to_json(), indent=1))
            try:
                self._put(tmp, _entry_rel(entry.key))
            finally:
                tmp.unlink(missing_ok=True)
        size = sum(store.object_path(d).stat().st_size for d in sent)
        return Transfer(len(entries), len(sent), size)

    def _put(self, local: Path, rel: str) -> None:
        fs, _ = self._files()
        target = self._path(rel)
        if _is_local(fs):  # a shared directory: make the file appear whole
            fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            partial = f"{target}.tmp-{uuid.uuid4().hex}"
            fs.put_file(str(local), partial)
            os.replace(partial, target)
        else:
            fs.put_file(str(local), target)

    # -- listing --------------------------------------------------------------------
    def keys(self) -> list[str]:
        """Every entry key the remote holds."""
        found: list[str] = []
        if not self.usable:
            return found
        with self._guard("listing"):
            fs, root = self._files()
            with suppress(FileNotFoundError):
                found = sorted(Path(p).stem for p in fs.glob(f"{root}/actions/*/*.json"))
        return found

    def entry(self, key: str) -> Entry | None:
        """The remote's entry for `key`, read only (nothing downloaded)."""
        found: Entry | None = None
        if not self.usable:
            return found
        with self._guard(f"reading {key[:12]}"):
            with suppress(FileNotFoundError):
                found = Entry.from_json(json.loads(self._files()[0].cat_file(self._path(_entry_rel(key)))))
        return found


def remote_for(config: DeployConfig, warn: Callable[[str], None]) -> RemoteCache | None:
    """The config's remote cache, or None (not configured)."""
    spec = config.cache
    if spec.remote is None:
        return None
    return RemoteCache(RemoteSpec(spec.remote, spec.endpoint_url, spec.push), warn)


def _objects(entry: Entry, store: Store) -> Iterator[tuple[str, int | None]]:
    """Every object an entry names: its log, its files, each tree's manifest and then the
    tree's files. Lazy on purpose: a tree's files are read from its manifest only once the
    caller has the manifest locally (pull fetches it when it is yielded)."""
    if entry.log:
        yield entry.log, None
    for output in entry.outputs.values():
        tree = output.kind is ArtifactKind.TREE
        yield output.digest, None if tree else output.size
        if tree:
            for meta in store.tree_manifest(output.digest).values():
                yield meta.digest, meta.size


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


def _object_rel(digest: str) -> str:
    return f"objects/{digest[:2]}/{digest}"


def _entry_rel(key: str) -> str:
    return f"actions/{key[:2]}/{key}.json"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"
