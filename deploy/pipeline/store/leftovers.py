"""What a killed command left in a repository: temp files of atomic writes
(`.<name>.<pid>.tmp`), staging dirs of releases and rollbacks (`.staging-release-<pid>-…`)
and of publishes beside it (`.<repository>.staging-<pid>-…`), files being repaired
(`.<name>.repair-<pid>`). Each carries the pid of the process that made it; every command
that reads a repository's stamps first removes those whose process is gone (`sweep`),
so no stray file is ever read, stamped or served. A live process's are left alone."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from deploy.pipeline.process import faults
from deploy.pipeline.store.locks import alive, sweep_dead

# The owner's pid in each kind of leftover name.
OWNED = (
    re.compile(r"^\..+\.(\d+)\.tmp$"),  # pipeline/hashing.atomic_write_text
    re.compile(r"^\.staging-release-(\d+)-[0-9a-f]+$"),  # serving/releases: staged versions, set aside ones
    re.compile(r"^\..+\.repair-(\d+)$"),  # repairing(): published_check.repair, releases.restore
)


@contextlib.contextmanager
def repairing(target: Path) -> Iterator[Path]:
    """Where to write `target`'s new content: renamed onto it, one rename, when the block
    ends without an error, removed when it raises. Named `.<name>.repair-<pid>`, so a
    kill in between leaves a file the next command sweeps, never a half-written target."""
    staged = target.with_name(f".{target.name}.repair-{os.getpid()}")
    staged.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield staged
        faults.point(f"repair:{target.name}", "repair")  # the worst moment: written, not in place
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)


def owner(name: str) -> int | None:
    """The pid in a leftover's name, or None for a name no deploy command writes."""
    for pattern in OWNED:
        found = pattern.match(name)
        if found:
            return int(found.group(1))
    return None


def sweep(repository: Path) -> list[str]:
    """Removes the leftovers of dead processes in `repository` (its root and each model dir,
    each version dir) and the publish staging dirs beside it; their paths, one each."""
    removed = []
    if repository.is_dir():
        for found in _candidates(repository):
            pid = owner(found.name)
            if pid is not None and not alive(pid):
                shutil.rmtree(found, ignore_errors=True) if found.is_dir() else found.unlink(missing_ok=True)
                removed.append(str(found))
    if repository.parent.is_dir():
        removed += [
            str(repository.parent / n) for n in sweep_dead(repository.parent, f".{repository.name}.staging-")
        ]
    return removed


def _candidates(repository: Path) -> list[Path]:
    """Hidden entries of the root, of every model dir and of every dir below them (three levels)."""
    found = [p for p in repository.iterdir() if p.name.startswith(".")]
    for model in (p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found += [p for p in model.iterdir() if p.name.startswith(".")]
        for sub in (p for p in model.iterdir() if p.is_dir() and not p.name.startswith(".")):
            found += [p for p in sub.iterdir() if p.name.startswith(".")]
    return found


def sweep_cache(cache_dir: Path) -> list[str]:
    """The temp dirs of stages whose run died (`<cache>/tmp/<stage>-<pid>-…`), for the
    commands that start no run (`deploy serve`, `releases`, `rollback`)."""
    tmp = cache_dir / "tmp"
    return sweep_dead(tmp) if tmp.is_dir() else []
