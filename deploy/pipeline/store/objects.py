"""Content-addressed artifact store with an action cache (the Bazel/DVC run-cache shape).

    objects/ab/<sha256>       every output file, read-only, deduplicated by content
    actions/ab/<key>.json     stage key -> the digests of the outputs it produced
    trees/<digest>/           a tree artifact laid out as hard links, for readers
    heads/<pipeline>.json     the key material each stage last ran with (for `plan`)
    tmp/                      stage work dirs; renamed into objects/ on success

An action entry is written last, atomically, after its objects are in place, so a
crash leaves at worst unreferenced objects, never an entry pointing at nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploy.pipeline.errors import EnvError
from deploy.pipeline.graph.contract import ArtifactKind, Metrics
from deploy.pipeline.graph.hashing import (
    StatMemo,
    atomic_write_text,
    canonical_json,
    digest_file,
    digest_json,
)
from deploy.pipeline.graph.keys import KeyParts
from deploy.pipeline.store import locks
from deploy.pipeline.store.once import Once, linkable

SCHEMA = 1


@dataclass(frozen=True)
class Output:
    kind: ArtifactKind
    digest: str
    size: int


@dataclass
class Entry:
    stage: str
    key: str
    components: KeyParts
    outputs: dict[str, Output]
    metrics: Metrics = field(default_factory=dict)
    duration_s: float = 0.0
    created: str = ""
    log: str | None = None  # digest of the stage log
    skipped: str | None = None  # why the stage did not apply here (then no outputs)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["components"] = self.components.to_json()
        data["outputs"] = {n: {**asdict(o), "kind": o.kind.value} for n, o in self.outputs.items()}
        return {"schema": SCHEMA, **data}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"cache entry schema {data.get('schema')!r}, expected {SCHEMA}")
        outputs = {
            n: Output(ArtifactKind(o["kind"]), o["digest"], int(o["size"]))
            for n, o in data["outputs"].items()
        }
        fields = {k: v for k, v in data.items() if k not in ("schema", "outputs", "components")}
        return cls(components=KeyParts.from_json(data["components"]), outputs=outputs, **fields)


@dataclass(frozen=True)
class TreeFile:
    """One file of a tree artifact's manifest."""

    digest: str
    size: int


@dataclass(frozen=True)
class TreeManifest:
    """A tree artifact: relative path -> file. Stored as an object; its digest is the
    tree's, and so enters the keys of the stages that read the tree. It therefore has no
    `schema` field: its JSON must stay byte-identical (`{"files": {rel: {"digest",
    "size"}}}`), and a new layout would be a new digest, never a misread file."""

    files: dict[str, TreeFile]

    def to_json(self) -> dict[str, object]:
        return {"files": {rel: asdict(f) for rel, f in self.files.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TreeManifest:
        return cls({rel: TreeFile(str(f["digest"]), int(f["size"])) for rel, f in data["files"].items()})

    @property
    def digest(self) -> str:
        return digest_json(self.to_json())


@dataclass(frozen=True)
class Head:
    """What a stage of a pipeline last ran with (`deploy plan` diffs against it)."""

    key: str
    components: KeyParts

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "components": self.components.to_json()}


class Store:
    # The folders a run writes in: one that is a file, or that cannot be written, fails the
    # run before it starts (runner._preflight), not as a raw OSError once a stage has run.
    LAYOUT = ("objects", "trees", "actions", "heads", "locks", "tmp")

    def __init__(self, root: Path) -> None:
        self.root = root.absolute()
        self.memo = StatMemo(self.root / "state.json")
        self.committed: list[Entry] = []  # entries made by this process (what a push sends)

    # -- objects -----------------------------------------------------------------
    def object_path(self, digest: str) -> Path:
        return self.root / "objects" / digest[:2] / digest

    def ingest(self, path: Path, kind: ArtifactKind) -> Output:
        """Moves a finished file or directory into the store."""
        if kind is ArtifactKind.TREE:
            return self._ingest_tree(path)
        size = path.stat().st_size
        return Output(kind, self._ingest_file(path), size)

    def _ingest_file(self, path: Path) -> str:
        digest = digest_file(path)
        dest = self.object_path(digest)
        if dest.exists() and self._object_problem(digest, dest.stat().st_size, deep=True) is None:
            path.unlink()
            return digest
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o444)  # discourage edits through hard links and copies
        os.replace(path, dest)
        self.memo.remember(dest, digest)
        return digest

    def object_problem(self, digest: str, size: int | None) -> str | None:
        """Why the object can't be served (missing, truncated, other bytes), rehashed."""
        return self._object_problem(digest, size, deep=True)

    def has_object(self, digest: str, size: int | None) -> bool:
        """Present and intact (the stat fast path, else a rehash)."""
        return self._object_problem(digest, size, deep=False) is None

    def adopt(self, path: Path, digest: str) -> None:
        """Moves in a file whose digest the caller has just verified (a download)."""
        dest = self.object_path(digest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o444)
        os.replace(path, dest)
        self.memo.remember(dest, digest)

    def _ingest_tree(self, root: Path) -> Output:
        files = sorted(p for p in root.rglob("*") if p.is_file())
        sized = [(p, p.stat().st_size) for p in files]  # before the files move into objects/
        manifest = TreeManifest(
            {str(p.relative_to(root)): TreeFile(self._ingest_file(p), size) for p, size in sized}
        )
        # Content-addressed: the stored object's digest is the manifest's digest_json.
        self._ingest_file(self._tmp_file(canonical_json(manifest.to_json())))
        shutil.rmtree(root, ignore_errors=True)
        return Output(ArtifactKind.TREE, manifest.digest, sum(f.size for f in manifest.files.values()))

    def _tmp_file(self, text: str) -> Path:
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.root / "tmp", prefix=locks.tmp_prefix("store"))
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return Path(name)

    def tree_manifest(self, digest: str) -> dict[str, TreeFile]:
        """The files of the tree artifact `digest` (relative path -> file)."""
        return TreeManifest.from_json(json.loads(self.object_path(digest).read_text())).files

    def path_of(self, output: Output) -> Path:
        """Where readers find an output: the object itself, or a laid-out tree whose
        files are what the manifest says (one altered since is laid out again)."""
        if output.kind is ArtifactKind.FILE:
            return self.object_path(output.digest)
        tree = self.root / "trees" / output.digest
        if tree.is_dir() and not self._tree_intact(output.digest, tree):
            shutil.rmtree(tree)
        if not tree.is_dir():
            self._lay_out_tree(output.digest, tree)
        return tree

    def _tree_intact(self, digest: str, tree: Path) -> bool:
        """Each file as laid out (stat memo, else a rehash), nothing missing."""
        for rel, meta in self.tree_manifest(digest).items():
            path = tree / rel
            if not path.is_file() or path.stat().st_size != meta.size:
                return False
            if not (self.memo.matches(path) and self.memo.known(path) == meta.digest):
                if digest_file(path) != meta.digest:
                    return False
                self.memo.remember(path, meta.digest)
        return True

    def _lay_out_tree(self, digest: str, dest: Path) -> None:
        tmp = Path(tempfile.mkdtemp(dir=self.work_root(), prefix=locks.tmp_prefix("tree")))
        try:
            self._copy_tree(digest, tmp)
        except BaseException:  # a full disk, a bad object, a signal: nothing half laid out stays
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(tmp, dest)
        except OSError:  # another run laid the same tree out first (same content, checked)
            shutil.rmtree(tmp, ignore_errors=True)
            if not dest.is_dir():
                raise
        for rel, meta in self.tree_manifest(digest).items():  # as laid out and checked
            self.memo.remember(dest / rel, meta.digest)

    def _copy_tree(self, digest: str, tmp: Path) -> None:
        manifest = self.tree_manifest(digest)
        once = Once()  # files the tree holds twice (one model under two formats) laid out once
        for rel, meta in manifest.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            # Copies of the objects, not links to them: ONNX and ONNX Runtime refuse an
            # external weights file with more than one link (their guard against hardlink
            # attacks). Made once per tree digest; warm runs find the tree laid out already.
            source = self.object_path(meta.digest)

            def write(source: Path = source, target: Path = target) -> None:
                shutil.copyfile(source, target)

            if once.place(meta.digest, target, write, linkable(rel, manifest)):
                continue
            os.chmod(target, 0o444)
            if digest_file(target) != meta.digest:  # the object was not what its name says
                raise EnvError(
                    f"cache object {meta.digest[:12]} ({rel}) does not match its digest: run `deploy cache verify`"
                )

    # -- verification ----------------------------------------------------------------
    def problem(self, output: Output, deep: bool = False) -> str | None:
        """Why an output can't be served (missing, truncated, altered), or None."""
        found = self._object_problem(
            output.digest, None if output.kind is ArtifactKind.TREE else output.size, deep
        )
        if found or output.kind is ArtifactKind.FILE:
            return found
        for rel, meta in self.tree_manifest(output.digest).items():
            bad = self._object_problem(meta.digest, meta.size, deep)
            if bad:
                return f"{rel}: {bad}"
        return None

    def _object_problem(self, digest: str, size: int | None, deep: bool) -> str | None:
        path = self.object_path(digest)
        if not path.is_file():
            return f"object {digest[:12]} is missing"
        actual = path.stat().st_size
        if size is not None and actual != size:
            return f"object {digest[:12]} is truncated or altered ({actual} bytes, expected {size})"
        if not deep and self.memo.matches(path) and actual >= (1 << 20):
            return None  # stat unchanged since we wrote it: trust it (fast path)
        if digest_file(path) != digest:
            return f"object {digest[:12]} does not match its digest (corrupted)"
        self.memo.remember(path, digest)
        return None

    # -- action entries --------------------------------------------------------------
    def entry_path(self, key: str) -> Path:
        return self.root / "actions" / key[:2] / f"{key}.json"

    def lookup(self, key: str) -> tuple[Entry | None, str | None]:
        """(entry, None) on a verified hit; (None, why) when an entry exists but is bad."""
        path = self.entry_path(key)
        if not path.is_file():
            return None, None
        try:
            entry = Entry.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            return None, f"cache entry {key[:12]} is unreadable ({exc})"
        bad = [f"{n}: {p}" for n, o in entry.outputs.items() if (p := self.problem(o))]
        return (None, "; ".join(bad)) if bad else (entry, None)

    def commit(self, entry: Entry, made_here: bool = True) -> None:
        atomic_write_text(self.entry_path(entry.key), json.dumps(entry.to_json(), indent=1))
        self.memo.save()
        if made_here:
            self.committed.append(entry)

    def drop(self, key: str) -> None:
        self.entry_path(key).unlink(missing_ok=True)

    def entries(self) -> Iterator[tuple[Path, Entry | None]]:
        for path in sorted((self.root / "actions").glob("*/*.json")):
            try:
                yield path, Entry.from_json(json.loads(path.read_text()))
            except (ValueError, KeyError, TypeError):
                yield path, None

    def work_root(self) -> Path:
        path = self.root / "tmp"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- heads: what each pipeline's stages last ran with --------------------------------
    def head(self, pipeline: str) -> dict[str, Head]:
        try:
            data = json.loads((self.root / "heads" / f"{pipeline}.json").read_text())
            return {stage: Head(h["key"], KeyParts.from_json(h["components"])) for stage, h in data.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def set_head(self, pipeline: str, stage: str, key: str, components: KeyParts) -> None:
        heads = self.head(pipeline)
        record = Head(key, components)
        if stage in heads and heads[stage].to_json() == record.to_json():
            return  # a cached rerun: nothing new to record
        heads[stage] = record
        text = json.dumps({name: h.to_json() for name, h in heads.items()}, indent=1)
        atomic_write_text(self.root / "heads" / f"{pipeline}.json", text)
