"""One build per stage key across concurrent runs sharing a cache (a CI agent running two
jobs of one config, a user starting a second `deploy run`): the first run to need a key
takes its lock (flock on `locks/<key>.lock`, removed when released) and builds; another waits, then finds the
entry the first committed and takes it from the cache. The kernel releases a lock when its
holder's process dies, however it dies, so a crashed run never blocks the others.

Temp dirs carry the pid of the run that made them (`<stage>-<pid>-…`), so the next run
(or `deploy cache gc`) can remove those whose run is dead."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def building(root: Path, key: str, waiting: Callable[[str], None]) -> Iterator[None]:
    """Holds the key's lock; `waiting(holder)` is called once if another run holds it.
    The lock file is removed by its holder (still locked), so the cache keeps none."""
    path = root / "locks" / key[:2] / f"{key}.lock"
    with _holding(path, _acquire(path, waiting)):
        yield


@contextlib.contextmanager
def _holding(path: Path, fd: int) -> Iterator[None]:
    """The locked `fd` of `path` with this process's pid in it; on the way out the file is
    removed (still locked), then unlocked and closed."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# The repositories each thread of this process holds the lock of: a release's recovery and its
# placing, or a publish inside a command that holds it, take it again without waiting on themselves.
_HELD: set[tuple[int, str]] = set()


@contextlib.contextmanager
def repository(
    path: Path, waiting: Callable[[str], None] | None = None, create: bool = True
) -> Iterator[None]:
    """The model repository's lock (`.<name>.lock` beside it, removed when released): a
    publish, a release, a rollback and the recovery of a killed one each hold it, so none
    reads or reverts a journal or a model directory another live command is half way through.
    Where no lock file can be made beside it (a read-only mount: nothing of ours writes
    there either; with `create` False, a folder that does not exist), it goes unlocked."""
    import threading

    where = path.resolve()  # one lock however the path is spelled (a symlink, ..)
    key, lock = (threading.get_ident(), str(where)), where.parent / f".{where.name}.lock"
    if key in _HELD or not (create or where.parent.is_dir()):
        yield
        return
    fd = _try_acquire(lock, waiting or _say_waiting(path), path)
    if fd is None:
        yield
        return
    _HELD.add(key)
    try:
        with _holding(lock, fd):
            yield
    finally:
        _HELD.discard(key)


def _try_acquire(lock: Path, waiting: Callable[[str], None], path: Path) -> int | None:
    import logging

    try:
        return _acquire(lock, waiting)
    except OSError as exc:
        logging.getLogger("deploy").warning("%s: no lock beside it (%s): going on unlocked", path, exc)
        return None


def _say_waiting(path: Path) -> Callable[[str], None]:
    import logging

    return lambda holder: logging.getLogger("deploy").warning(
        "waiting for %s, which is publishing, releasing or rolling back in %s", holder, path
    )


def _acquire(path: Path, waiting: Callable[[str], None]) -> int:
    """A locked fd of `path`. A waiter can be granted the lock of a file its holder
    removed meanwhile; the lock then guards nothing, and it tries the current file."""
    told = False
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not told:
                waiting(_holder(fd))
                told = True
            fcntl.flock(fd, fcntl.LOCK_EX)  # until the holder commits, fails or dies
        if _is_current(fd, path):
            return fd
        os.close(fd)


def _is_current(fd: int, path: Path) -> bool:
    try:
        found = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino)


def _holder(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return f"pid {text}" if text.isdigit() else "another run"


def tmp_prefix(stage: str) -> str:
    """A temp dir's name start: the stage and this process's pid."""
    return f"{stage}-{os.getpid()}-"


def sweep_dead(tmp: Path, prefix: str = "") -> list[str]:
    """Removes the temp dirs and files (named `prefix…-<pid>-…`) of runs whose process is
    gone; their names."""
    removed = []
    for entry in tmp.glob(f"{prefix}*"):
        pid = _pid_of(entry.name)
        if pid is not None and not alive(pid):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return removed


def _pid_of(name: str) -> int | None:
    parts = name.split("-")
    found = [p for p in parts[1:-1] if p.isdigit()] if len(parts) >= 3 else []
    return int(found[-1]) if found else None


def alive(pid: int) -> bool:
    """Whether a process of that pid runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
