"""The content-addressed store: atomic ingest, verification, damaged entries."""

from __future__ import annotations

import json
import os

import pytest

from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.graph.keys import KeyParts
from deploy.pipeline.store.objects import Entry, Head, Store, TreeFile, TreeManifest


def make(tmp_path, name: str, data: bytes):
    path = tmp_path / "work" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "cache")


def commit(store, outputs, key="k" * 64):
    store.commit(Entry("s", key, KeyParts("s", 1, {}, {}, {}, {}), outputs))
    return key


def test_ingest_moves_file_in_read_only_and_deduplicates(store, tmp_path):
    one = store.ingest(make(tmp_path, "a", b"hello"), ArtifactKind.FILE)
    two = store.ingest(make(tmp_path, "b", b"hello"), ArtifactKind.FILE)
    assert one == two and one.size == 5
    path = store.object_path(one.digest)
    assert path.read_bytes() == b"hello"
    assert oct(path.stat().st_mode)[-3:] == "444"
    assert not (tmp_path / "work" / "a").exists()


def test_lookup_hit_and_miss(store, tmp_path):
    out = store.ingest(make(tmp_path, "a", b"x" * 10), ArtifactKind.FILE)
    key = commit(store, {"a": out})
    entry, problem = store.lookup(key)
    assert problem is None and entry.outputs["a"] == out
    assert store.lookup("0" * 64) == (None, None)


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_damaged_objects_are_reported_not_served(store, tmp_path, damage):
    out = store.ingest(make(tmp_path, "a", b"0123456789"), ArtifactKind.FILE)
    key = commit(store, {"a": out})
    path = store.object_path(out.digest)
    os.chmod(path, 0o644)
    if damage == "truncate":
        path.write_bytes(b"01234")
    elif damage == "flip":
        path.write_bytes(b"0123456780")
    else:
        path.unlink()
    entry, problem = store.lookup(key)
    assert entry is None
    assert {"truncate": "truncated", "flip": "corrupted", "delete": "missing"}[damage] in problem


def test_large_object_fast_path_still_catches_changed_stat(store, tmp_path):
    data = os.urandom(2 << 20)
    out = store.ingest(make(tmp_path, "big", data), ArtifactKind.FILE)
    key = commit(store, {"big": out})
    assert store.lookup(key)[1] is None
    path = store.object_path(out.digest)
    os.chmod(path, 0o644)
    with open(path, "r+b") as fh:  # same size, new content, new mtime
        fh.seek(100)
        fh.write(b"\x00" * 16 if data[100:116] != b"\x00" * 16 else b"\x01" * 16)
    assert "corrupted" in store.lookup(key)[1]


def test_tree_artifacts_round_trip(store, tmp_path):
    root = tmp_path / "work" / "tree"
    (root / "m" / "1").mkdir(parents=True)
    (root / "m" / "config.pbtxt").write_text("name: 'm'")
    (root / "m" / "1" / "model.onnx").write_bytes(b"onnx")
    out = store.ingest(root, ArtifactKind.TREE)
    laid = store.path_of(out)
    assert (laid / "m" / "1" / "model.onnx").read_bytes() == b"onnx"
    assert sorted(store.tree_manifest(out.digest)) == ["m/1/model.onnx", "m/config.pbtxt"]
    key = commit(store, {"t": out})
    os.chmod(store.object_path(store.tree_manifest(out.digest)["m/config.pbtxt"].digest), 0o644)
    store.object_path(store.tree_manifest(out.digest)["m/config.pbtxt"].digest).write_text("name: 'x'")
    assert "m/config.pbtxt" in store.lookup(key)[1]


def test_unreadable_entry_is_a_problem_not_a_crash(store):
    path = store.entry_path("e" * 64)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    entry, problem = store.lookup("e" * 64)
    assert entry is None and "unreadable" in problem


def test_a_tree_digest_is_its_manifests_pinned_json(store, tmp_path):
    """A tree's digest enters the keys of the stages reading it: the manifest's JSON (and
    so this digest, computed before TreeManifest was a record) must never change."""
    root = tmp_path / "work" / "t"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("hello")
    (root / "sub" / "b.bin").write_bytes(b"xxx")
    out = store.ingest(root, ArtifactKind.TREE)
    assert out.digest == "ec2b850783d2a36d347d4a40d5d89d215fd8a0a894277832b2466b6b0da3015d" and out.size == 8
    stored = json.loads(store.object_path(out.digest).read_text())
    manifest = TreeManifest.from_json(stored)
    assert manifest.to_json() == stored and manifest.digest == out.digest
    assert manifest.files["sub/b.bin"] == TreeFile(
        "cd2eb0837c9b4c962c22d2ff8b5441b7b45805887f051d39bf133b583baf6860", 3
    )


def test_entries_and_heads_read_back_as_written(store, tmp_path):
    parts = KeyParts("s", 2, {"opset": 17}, {"name": "tiny"}, {"onnx": "b" * 64}, {"python": "3.11.9"})
    out = store.ingest(make(tmp_path, "a", b"hello"), ArtifactKind.FILE)
    entry = Entry("s", parts.key, parts, {"a": out}, {"headline": "ok", "n": [1, 2]}, 1.5, "2026-01-01")
    store.commit(entry)
    assert store.lookup(parts.key) == (entry, None)
    assert Entry.from_json(json.loads(json.dumps(entry.to_json()))) == entry
    store.set_head("p", "s", parts.key, parts)
    assert store.head("p") == {"s": Head(parts.key, parts)}


def test_an_entry_of_another_schema_is_a_problem_naming_both(store):
    path = store.entry_path("f" * 64)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": 99, "stage": "s"}))
    entry, problem = store.lookup("f" * 64)
    assert entry is None and "schema 99, expected 1" in problem
