"""Digests: canonical JSON for keys, sha256 for files, a stat memo to skip rehashing.

sha256 streams at ~1.5 GB/s on the reference CPU (hashlib.file_digest), so hashing
a 100 MB ONNX costs ~70 ms; the memo makes a warm rerun pay that only for files
whose (inode, size, mtime, ctime) changed, as DVC's state DB does with mtime alone:
ctime catches an edit whose mtime was put back (`touch -d`), which mtime cannot.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

# Files smaller than this are always rehashed: cheap, and catches in-place edits
# that keep size and mtime.
ALWAYS_REHASH_BYTES = 1 << 20


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def digest_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def digest_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def stat_token(path: Path) -> list[int]:
    """What a file's stat says about its content: inode, size, mtime and ctime. ctime is
    the kernel's: every write (and every utime, so a flipped byte with its mtime put back)
    moves it, and no user call sets it."""
    st = path.stat()
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class StatMemo:
    """path -> (inode, size, mtime_ns, ctime_ns, digest), persisted as one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, list[Any]] = self._load()
        self._dirty = False
        self.consulted: set[str] = set()  # files digested through this memo (a run's sources)

    def _load(self) -> dict[str, list[Any]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # a lost or damaged memo only costs rehashing
        return data if isinstance(data, dict) else {}

    def digest(self, path: Path) -> str:
        """The file's sha256, from the memo when its stat is unchanged."""
        key, token = str(path.absolute()), stat_token(path)
        self.consulted.add(key)
        known = self._entries.get(key)
        if known and known[:-1] == token and token[1] >= ALWAYS_REHASH_BYTES:
            return str(known[-1])
        value = digest_file(path)
        self.remember(path, value)
        return value

    def matches(self, path: Path) -> bool:
        """True when the file's stat equals what was memoised (a cheap freshness check)."""
        known = self._entries.get(str(path.absolute()))
        return known is not None and known[:-1] == stat_token(path)

    def known(self, path: Path) -> str | None:
        """The digest memoised for the path (whatever its stat now says)."""
        known = self._entries.get(str(path.absolute()))
        return str(known[-1]) if known else None

    def remember(self, path: Path, value: str) -> None:
        self._entries[str(path.absolute())] = [*stat_token(path), value]
        self._dirty = True

    def save(self) -> None:
        if self._dirty:
            try:
                atomic_write_text(self.path, json.dumps(self._entries))
            except OSError:  # a full disk included: the memo only spares rehashing
                return
            self._dirty = False


# Every temp file deploy writes beside its target: `.<name>.<owner pid>.tmp`. The next
# command removes those whose owner is dead (pipeline/store/leftovers.py).
TMP_SUFFIX = ".tmp"


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temp file beside `path`, then rename: readers see old or new, never half.
    A write that fails leaves no temp file; one that finds no room is a DiskFull naming `path`."""
    from deploy.pipeline.errors import disk_full
    from deploy.pipeline.process import faults

    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        faults.point(f"write:{path.name}", "write")  # the worst moment: written, not yet in place
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        full = disk_full(exc)
        if full is not None:
            raise type(full)(path, full.errno or 28) from exc
        raise


def write_with_room(path: Path, text: str) -> Path:
    """`path` atomically; where its disk is full, a file of the same name in the system's
    temp dir instead (a run's summary and CI files must exist somewhere). Returns where it
    went; raises the first DiskFull when neither had room."""
    import tempfile

    from deploy.pipeline.errors import DiskFull

    try:
        atomic_write_text(path, text)
        return path
    except DiskFull as full:
        elsewhere = Path(tempfile.gettempdir()) / f"deploy-{os.getpid()}-{path.name}"
        try:
            atomic_write_text(elsewhere, text)
        except DiskFull:
            raise full from None
        return elsewhere
