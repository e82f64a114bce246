"""Released versions mirrored to object storage (deploy.serving.release_mirror): on moto's
S3 server (real HTTP, s3fs), and, for every point a publish can stop at, on fsspec's
in-memory file system with a write that fails there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.pipeline.errors import EnvError
from deploy.pipeline.publish.readback import complete
from deploy.pipeline.publish.tree import destination, write_manifest_here
from deploy.serving import releases
from deploy.serving.release_journal import releasing
from deploy.serving.release_mirror import mirror
from tests.helpers import S3Server

CONFIG = 'name: "tiny_python"\nbackend: "python"\nmax_batch_size: 16\n'


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    server = S3Server().start()
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    server.client().create_bucket(Bucket="models")
    yield server
    server.stop()


def _release(repository: Path, tmp_path: Path, version: int, weights: bytes, keep: int = 3) -> Path:
    """A python-backend model's version, released the way the release stage does."""
    candidate = tmp_path / f"candidate{version}" / "tiny_python"
    (candidate / "1").mkdir(parents=True)
    (candidate / "1" / "model.onnx").write_bytes(weights)
    (candidate / "1" / "model.py").write_text("# the python backend's entry\n")
    (candidate / "1" / "extra.bin").write_bytes(weights[::-1])  # what the model file reads (external data)
    (candidate / "config.pbtxt").write_text(CONFIG)
    files = releases.file_digests(candidate / "1")
    record = releases.ReleaseRecord(
        "tiny", "tiny_python", version, files, f"2026-11-26T0{version}:00:00+00:00"
    )
    assert (
        releasing(repository, "tiny", keep, [(repository / "tiny_python", candidate / "1", record)], []) == []
    )
    return repository / "tiny_python"


def _local_files(repository: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repository)): p.read_bytes() for p in repository.rglob("*") if p.is_file()}


def _remote_files(s3: S3Server) -> dict[str, bytes]:
    client = s3.client()
    return {
        k.removeprefix("repo/"): client.get_object(Bucket="models", Key=k)["Body"].read()
        for k in s3.keys("models", "repo/")
    }


def test_the_bucket_follows_releases_prunes_and_rollbacks(tmp_path: Path, s3: S3Server) -> None:
    repository = tmp_path / "repo"
    model = _release(repository, tmp_path, 1, b"weights-1")
    write_manifest_here(repository, "tiny", ["tiny_python"])
    assert mirror(repository, "s3://models/repo", "tiny", ["tiny_python"]) == ["tiny_python"]
    assert _remote_files(s3) == _local_files(repository)
    assert complete("s3://models/repo", "tiny") == []

    stamps = {k: o["LastModified"] for k, o in _listing(s3).items()}
    assert mirror(repository, "s3://models/repo", "tiny", ["tiny_python"]) == []  # in sync: nothing written
    assert {k: o["LastModified"] for k, o in _listing(s3).items()} == stamps

    _release(repository, tmp_path, 2, b"weights-2", keep=1)  # v1 kept: the good one before the served
    _release(repository, tmp_path, 3, b"weights-3", keep=1)  # v1 pruned, v2 kept
    assert releases.versions(model) == [2, 3]
    releases.serve_only(model, 3)
    releases.mark_rolled_back(model, 3, "2026-11-26T03:00:00+00:00 to v2")  # a record that changed
    releases.stamp(model, "tiny")
    mirror(repository, "s3://models/repo", "tiny", ["tiny_python"])
    remote = _remote_files(s3)
    assert remote == _local_files(repository) and not any(k.startswith("tiny_python/1/") for k in remote)
    assert b"specific" in remote["tiny_python/config.pbtxt"] and complete("s3://models/repo", "tiny") == []


def _listing(s3: S3Server) -> dict[str, Any]:
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket="models", Prefix="repo/")
    return {o["Key"]: o for page in pages for o in page.get("Contents", [])}


def test_a_mirror_stopped_at_any_write_never_shows_a_loadable_partial_version(tmp_path: Path) -> None:
    """From the same start (v1 published), the publish of v2 and a new config dies at each
    of its writes in turn. Each time the remote is checked — a version's model.py only
    beside the model file it opens, its record only when it is whole, the copy not passing
    as whole once anything was written — and a rerun then completes it."""
    repository = tmp_path / "repo"
    _release(repository, tmp_path, 1, b"weights-1")
    remote = f"memory://mirror-{tmp_path.name}"
    root = f"/{remote.removeprefix('memory://')}"
    mirror(repository, remote, "tiny", ["tiny_python"])
    fs = destination(remote).fs
    start = {path: fs.cat_file(path) for path in fs.find(root)}
    _release(repository, tmp_path, 2, b"weights-2")
    (repository / "tiny_python" / "config.pbtxt").write_text(CONFIG.replace("16", "8"))  # changed too
    releases.stamp(repository / "tiny_python", "tiny")
    point = 0
    while (written := _mirror_failing_at(repository, remote, point)) is not None:
        _check_partial(fs, f"{root}/tiny_python")
        assert written == 0 or complete(remote, "tiny"), f"half-published at write {point}, yet whole"
        mirror(repository, remote, "tiny", ["tiny_python"])  # the next run
        assert {p: fs.cat_file(f"{root}/{p}") for p in _local_files(repository)} == _local_files(repository)
        assert complete(remote, "tiny") == []
        fs.rm(root, recursive=True)
        for path, data in start.items():
            fs.pipe_file(path, data)
        point += 1
    assert point >= 5  # the stamp, v2's three files and the config at least


def _mirror_failing_at(repository: Path, remote: str, point: int) -> int | None:
    """Mirrors with the `point`-th write failing; returns how many writes were done
    before it, or None when the mirror needed no more than `point` writes."""
    fs = destination(remote).fs
    writes = {"n": 0}
    originals = {name: getattr(fs, name) for name in ("put_file", "pipe_file", "rm_file", "rm")}

    def failing(name: str) -> Any:
        def write(*args: Any, **kwargs: Any) -> Any:
            if writes["n"] == point:
                raise OSError(f"injected failure at write {point} ({name})")
            writes["n"] += 1
            return originals[name](*args, **kwargs)

        return write

    for name in originals:
        setattr(fs, name, failing(name))
    try:
        mirror(repository, remote, "tiny", ["tiny_python"])
        return None
    except EnvError as exc:
        assert "injected failure" in str(exc)
        return writes["n"]
    finally:
        for name, original in originals.items():
            setattr(fs, name, original)


def _check_partial(fs: Any, model: str) -> None:
    """model.py before anything (the python backend then fails a partial version's load
    cleanly), the model file after the rest, the record only once the version is whole."""
    for version in ("1", "2"):
        present = {p.rsplit("/", 1)[-1] for p in fs.find(f"{model}/{version}")}
        if present:
            assert "model.py" in present, (version, present)
        if "model.onnx" in present:
            assert "extra.bin" in present, (version, present)
        if releases.RECORD_FILE in present:
            assert {"model.py", "model.onnx", "extra.bin"} <= present, (version, present)
