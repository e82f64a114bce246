"""Whether a published repository holds, byte for byte, what was published: every file a
model's stamp lists, against its digest (before `deploy serve` or smoke start a server on
it), and putting back from the cache what was altered (`deploy serve --repair`).

Locally a file deploy wrote and nothing wrote since is known by its stat (the cache's
memo: inode, size, mtime and ctime; a write changes ctime, and no user call can set it
back); any other file is hashed, and remembered. A copy on object storage is hashed as it
is read. A file the cache no longer holds cannot be repaired: `deploy run` publishes
again."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from deploy.pipeline.errors import EnvError
from deploy.pipeline.graph.hashing import digest_file
from deploy.pipeline.publish.tree import STAMP, Stamp, destination, intact, manifest_name
from deploy.pipeline.store.leftovers import repairing
from deploy.pipeline.store.objects import Store

CHUNK = 1 << 20


@dataclass(frozen=True)
class Altered:
    model: str
    rel: str  # inside the model dir
    digest: str  # what was published
    size: int

    def text(self) -> str:
        return f"{self.model}/{self.rel}: not the file published (its sha256 is not {self.digest[:12]}…)"


def altered(dest: Path | str, pipeline: str, store: Store | None) -> list[Altered]:
    """The files of the pipeline's published models whose content differs from their
    stamp's digest (missing and resized ones are `publish.complete`'s to name)."""
    found = []
    for model, stamp in _stamps(dest, pipeline):
        for rel, (digest, size) in sorted(stamp.files.items()):
            if not _same(dest, f"{model}/{rel}", digest, size, store):
                found.append(Altered(model, rel, digest, size))
    return found


def not_as_published(dest: Path, pipeline: str, store: Store | None) -> list[str]:
    """Each model or file that is not as the last publish or release left it: missing,
    resized, or another content."""
    from deploy.pipeline.publish.readback import complete

    found = complete(dest, pipeline)
    named = {line.split(":")[0] for line in found}  # a resized file is not named twice
    return found + [a.text() for a in altered(dest, pipeline, store) if f"{a.model}/{a.rel}" not in named]


def _stamps(dest: Path | str, pipeline: str) -> list[tuple[str, Stamp]]:
    found = []
    listed = _read_json(dest, manifest_name(pipeline)).get("models")
    for model in listed if isinstance(listed, list) else []:
        try:
            stamp = Stamp.from_json(_read(dest, f"{model}/{STAMP}"))
        except OSError:
            stamp = None
        if stamp is not None:
            found.append((str(model), stamp))
    return found


def _same(dest: Path | str, rel: str, digest: str, size: int, store: Store | None) -> bool:
    if isinstance(dest, Path):
        path = dest / rel
        if store is not None:
            return intact(store, path, digest, size)
        return path.is_file() and path.stat().st_size == size and digest_file(path) == digest
    where = destination(dest)
    try:
        with where.fs.open(f"{where.root}/{rel}", "rb") as stream:
            found = hashlib.sha256()
            while chunk := stream.read(CHUNK):
                found.update(chunk)
    except OSError:
        return False
    return found.hexdigest() == digest


def repair(dest: Path | str, found: list[Altered], store: Store) -> list[str]:
    """Puts each altered file back from the cache (its object, by digest, checked), each by
    one rename locally; returns what it did, one line each."""
    missing = [a for a in found if not store.has_object(a.digest, a.size)]
    if missing:
        raise EnvError(
            f"cannot repair {', '.join(f'{a.model}/{a.rel}' for a in missing)}: the cache no longer "
            f"holds the published file; run `deploy run` to publish again"
        )
    for a in found:
        _put_back(dest, a, store)
    return [f"repaired {a.model}/{a.rel} from the cache ({a.digest[:12]})" for a in found]


def _put_back(dest: Path | str, a: Altered, store: Store) -> None:
    source = store.object_path(a.digest)
    if not isinstance(dest, Path):
        where = destination(dest)
        where.fs.put_file(str(source), f"{where.root}/{a.model}/{a.rel}")
        return
    target = dest / a.model / a.rel
    with repairing(target) as staged:
        shutil.copyfile(source, staged)
        if digest_file(staged) != a.digest:
            raise EnvError(
                f"{source}: the cache's object is not what its name says; run `deploy cache verify`"
            )
    store.memo.remember(target, a.digest)


def _read(dest: Path | str, rel: str) -> bytes:
    if isinstance(dest, Path):
        return (dest / rel).read_bytes()
    where = destination(dest)
    return bytes(where.fs.cat_file(f"{where.root}/{rel}"))


def _read_json(dest: Path | str, rel: str) -> dict[str, object]:
    try:
        data = json.loads(_read(dest, rel))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
