"""`deploy cache ls|gc|verify`: listing, garbage collection and deep verification."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.store import locks
from deploy.pipeline.store.objects import Entry, Store

STALE_TMP_SECONDS = 3600


@dataclass
class GcReport:
    entries: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    freed_bytes: int = 0


def head_keys(store: Store) -> dict[str, list[str]]:
    """key -> pipelines whose last run used it (the GC roots)."""
    roots: dict[str, list[str]] = {}
    for path in sorted((store.root / "heads").glob("*.json")):
        for record in json.loads(path.read_text()).values():
            roots.setdefault(record["key"], []).append(path.stem)
    return roots


def live_objects(store: Store, entry: Entry) -> set[str]:
    digests = set()
    for output in entry.outputs.values():
        digests.add(output.digest)
        if output.kind is ArtifactKind.TREE and store.object_path(output.digest).is_file():
            digests.update(m.digest for m in store.tree_manifest(output.digest).values())
    return digests


def collect(store: Store, dry_run: bool) -> GcReport:
    """Keeps the entries some pipeline's last run used; drops the rest and orphans."""
    roots, report, live = head_keys(store), GcReport(), set()
    for path, entry in store.entries():
        if entry is not None and entry.key in roots:
            live |= live_objects(store, entry)
            continue
        report.entries.append(path.stem)
        if not dry_run:
            path.unlink()
    for obj in sorted((store.root / "objects").glob("*/*")):
        if obj.name not in live:
            report.objects.append(obj.name)
            report.freed_bytes += obj.stat().st_size
            if not dry_run:
                obj.unlink()
    if not dry_run:
        _sweep(store, live)
    return report


def _sweep(store: Store, live: set[str]) -> None:
    for tree in (store.root / "trees").glob("*"):
        if tree.name not in live:
            shutil.rmtree(tree, ignore_errors=True)
    locks.sweep_dead(store.work_root())  # runs that died: their pid is in the name
    for tmp in (store.root / "tmp").glob("*"):  # older names, without a pid
        if time.time() - tmp.stat().st_mtime > STALE_TMP_SECONDS:
            shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink()


def verify(store: Store) -> list[tuple[Path, str]]:
    """Rehashes every object of every entry; drops entries that can't be served."""
    bad = []
    for path, entry in store.entries():
        problem = "unreadable entry" if entry is None else _entry_problem(store, entry)
        if problem:
            bad.append((path, problem))
            path.unlink()
    store.memo.save()
    return bad


def _entry_problem(store: Store, entry: Entry) -> str | None:
    # A corrupted object stays until a rerun rewrites it: ingest replaces objects
    # that fail a deep check, so nothing can serve it once its entry is gone.
    for name, output in entry.outputs.items():
        problem = store.problem(output, deep=True)
        if problem:
            return f"{entry.stage}.{name}: {problem}"
    return None
