"""Before a run: every directory it will write must be creatable. Finding out after the
first stage ran (or an hour of engine building) is too late, and the error would be a
raw OSError from deep inside the store."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from deploy.pipeline.errors import EnvError


def require_writable(places: dict[str, Path]) -> None:
    """`places`: config field -> directory. One EnvError naming every one that cannot be written."""
    problems = [
        f"{field}: {path}: {why}" for field, path in places.items() if (why := problem(path.absolute()))
    ]
    if problems:
        raise EnvError("cannot write where the config says: " + "; ".join(problems))


def problem(path: Path) -> str | None:
    """Why nothing can be written at directory `path` (made where missing), or None."""
    try:
        if path.is_symlink() and not path.exists():  # every write would meet the link itself
            return f"{path} is a symlink to {os.readlink(path)}, which {_dangles(path)}"
        existing = next(p for p in (path, *path.parents) if p.exists())
    except OSError as exc:  # a name over 255 bytes (ENAMETOOLONG), a path through a file, ...
        return exc.strerror or str(exc)
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"no write permission in {existing}"
    return _refused_in(existing)


def present(path: Path) -> bool:
    """There, as a file, a folder or a link (dangling too); False where the name cannot even
    be looked up (too long: problem() says why of the folder above it)."""
    try:
        return path.exists() or path.is_symlink()
    except OSError:
        return False


def _dangles(link: Path) -> str:
    try:
        link.resolve(strict=True)
    except RuntimeError:  # 3.11's word for a loop
        return "leads back to itself (a loop of links)"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "leads back to itself (a loop of links)"
    return "does not exist"


def _refused_in(directory: Path) -> str | None:
    """Mode bits say yes to root where the file system still says no (/proc, /sys, an
    immutable folder, a read-only mount): a directory made and removed there is the answer."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".deploy-writable-", dir=directory))
    except OSError as exc:
        return f"nothing can be created in {directory} ({exc.strerror or exc})"
    return None


# Files deploy writes (cache, run records, repository) are readable by all and writable by
# their owner only, whatever the caller's umask (under a umask of 000, 82 entries were
# world-writable: anyone on the machine could have changed what Triton serves).
UMASK = 0o022


NO_ROOM = 1 << 20  # bytes free under which a failed write is the disk's fault, not the stage's


def full_of(*paths: Path) -> Path | None:
    """The first of `paths` whose file system is (all but) full."""
    for path in paths:
        with contextlib.suppress(OSError):
            found = os.statvfs(path)
            if found.f_bavail * found.f_frsize < NO_ROOM:
                return path
    return None
