"""Released versions on object storage (`triton_config.publish_to`): after a release or a
rollback changed the local repository, each of the pipeline's model dirs is mirrored to
the remote one. Object storage has no rename, so the order of the writes is what keeps a
reader safe:

  1. the model's stamp goes first: `complete()`, checked before `deploy serve --published`
     or smoke start a server on the copy, calls the model not whole until step 5;
  2. each version the remote lacks, or holds with another release record, is sent file by
     file, each upload's size checked: the python backend's model.py first, the format's
     model file (model.onnx, model.plan, …) after every other file, the release record
     last. A server that lists the version before it is whole then fails that version's
     load and keeps serving the one it has: the format's backends find no model file, and
     model.py finds no model to open. (A version holding model.onnx without model.py
     wedges tritonserver 2.51's python backend instead: the load never returns, and every
     later load of the model waits behind it — measured, so model.py goes first.)
  3. then the model's config.pbtxt, where it differs (its version_policy may name a
     version that is only now complete);
  4. then the versions the local dir no longer holds (pruned) are deleted;
  5. last the stamp, and once every model is done, the pipeline's manifest.

A kill at any point leaves the remote serving what it served; the next release or rollback
finishes the mirror (the release stage mirrors unchanged models too)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from deploy.pipeline.errors import EnvError
from deploy.pipeline.publish.tree import STAMP, Destination, Verification
from deploy.serving import releases
from deploy.serving.layout import LAYOUTS

CONFIG_FILE = "config.pbtxt"
# What a format's backend opens in a version dir: sent after the files it reads.
MODEL_FILES = frozenset(layout.model_file for layout in LAYOUTS.values())
ENTRY_FILE = "model.py"  # the python backend's: first, see above


def mirror(repository: Path, remote: str, pipeline: str, models: Sequence[str]) -> list[str]:
    """Makes `remote/<model>` hold what `repository/<model>` holds, for each of `models`,
    then lists them in the pipeline's manifest there; returns the models it changed."""
    from deploy.pipeline.publish.tree import destination, write_manifest

    try:
        where = destination(remote)
        where.fs.invalidate_cache()  # another process may have written since this one listed
        changed = [m for m in models if _mirror(where, repository / m)]
        write_manifest(where, pipeline, models, _as_here(repository, pipeline))
    except EnvError:
        raise
    except Exception as exc:  # every storage backend has its own errors; all mean the same here
        raise EnvError(f"publishing the release to {remote} failed: {type(exc).__name__}: {exc}") from exc
    return changed


def _as_here(repository: Path, pipeline: str) -> Verification:
    """What the local manifest says verified the models (and which it could not): the copy
    says the same (it said `unverified: []` of a release no server checked)."""
    import json

    from deploy.pipeline.publish.stamp import manifest_name

    try:
        found = json.loads((repository / manifest_name(pipeline)).read_text())
        return Verification(
            tuple(found.get("verified_by") or ()),
            str(found.get("tree") or ""),
            tuple(found.get("unverified") or ()),
        )
    except (OSError, ValueError, AttributeError):  # none here: nothing to say of the models
        return Verification()


def _mirror(where: Destination, model_dir: Path) -> bool:
    target = f"{where.root}/{model_dir.name}"
    local = releases.versions(model_dir)
    remote = _remote_versions(where, target)
    send = [v for v in local if v not in remote or _differs(where, model_dir, target, v)]
    stale = [v for v in remote if v not in local]
    config = (model_dir / CONFIG_FILE).read_bytes()
    stamp = _local(model_dir / STAMP)
    same_config = _read(where, f"{target}/{CONFIG_FILE}") == config
    if not send and not stale and same_config and _read(where, f"{target}/{STAMP}") == stamp:
        return False
    if where.fs.exists(f"{target}/{STAMP}"):
        where.fs.rm_file(f"{target}/{STAMP}")
    for version in send:
        _send_version(where, model_dir / str(version), f"{target}/{version}")
    if not same_config:
        where.fs.pipe_file(f"{target}/{CONFIG_FILE}", config)
    for version in stale:
        where.fs.rm(f"{target}/{version}", recursive=True)
    if stamp is not None:
        where.fs.pipe_file(f"{target}/{STAMP}", stamp)
    return True


def _send_version(where: Destination, version_dir: Path, target: str) -> None:
    found = (p for p in version_dir.rglob("*") if p.is_file() and releases.BYTECODE not in p.parts)
    files = sorted(found, key=_order)
    for path in files:
        rel = path.relative_to(version_dir).as_posix()
        where.fs.put_file(str(path), f"{target}/{rel}")
        if int(where.fs.size(f"{target}/{rel}")) != path.stat().st_size:
            raise EnvError(f"{target}/{rel}: the stored object's size differs from the file sent")
    sent = {f"{target}/{p.relative_to(version_dir).as_posix()}" for p in files}
    for leftover in set(where.fs.find(target)) - sent:  # an earlier, different upload's
        where.fs.rm_file(leftover)


def _order(path: Path) -> tuple[int, str]:
    if path.name == ENTRY_FILE:
        return 0, path.name
    if path.name == releases.RECORD_FILE:
        return 3, path.name
    return (2 if path.name in MODEL_FILES else 1), path.as_posix()


def _remote_versions(where: Destination, target: str) -> list[int]:
    if not where.fs.exists(target):
        return []
    names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in where.fs.ls(target, detail=False)]
    return sorted(int(n) for n in names if n.isdigit() and int(n) > 0)


def _differs(where: Destination, model_dir: Path, target: str, version: int) -> bool:
    """The remote version's release record is not the local one (a rollback marks it, an
    interrupted upload lacks it)."""
    name = f"{version}/{releases.RECORD_FILE}"
    return _read(where, f"{target}/{name}") != _local(model_dir / name)


def _local(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _read(where: Destination, path: str) -> bytes | None:
    try:
        return bytes(where.fs.cat_file(path))
    except OSError:  # FileNotFoundError included
        return None
