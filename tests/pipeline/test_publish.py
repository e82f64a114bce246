"""Publishing the repository out of the cache: one protocol, each test run once against a
local directory and once against a real S3 server (moto's, over HTTP). Every call the
protocol makes that writes or deletes is recorded, so "touches nothing" and "in this
order" are checked on the calls themselves, not on timestamps."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import deploy.pipeline.publish.tree as publishing
from deploy.pipeline.errors import EnvError
from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.process import faults
from deploy.pipeline.publish.tree import SCHEMA, STAMP, Stamp, destination, in_order, publish
from deploy.pipeline.store.objects import Output, Store
from tests.helpers import S3Server

BUCKET = "models"
FILES = {
    "m_onnx/config.pbtxt": "name: 'm_onnx'",
    "m_onnx/0_labels.txt": "cat",  # a root file that sorts before the version dir
    "m_onnx/1/model.onnx": "bytes",
    "m_onnx/1/model.onnx.data": "weights",
    "m_py/config.pbtxt": "name: 'm_py'",
    "m_py/1/model.py": "x = 1",
}
WRITES = frozenset({"put_file", "pipe_file", "copy", "mv", "rm", "rm_file", "makedirs"})


class Recording:
    """An fsspec filesystem that logs every writing call publishing makes through it."""

    def __init__(self, fs: Any, log: list[tuple[str, ...]]) -> None:
        self._fs, self._log = fs, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fs, name)
        if name not in WRITES:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._log.append((name, *(str(a) for a in args[:2])))
            return attr(*args, **kwargs)

        return call


@dataclass
class Target:
    """A publish destination, a way to read what landed there, and the writes made to it."""

    dest: Path | str
    fs: Any
    root: str
    local: bool
    writes: list[tuple[str, ...]] = field(default_factory=list)

    def files(self) -> dict[str, str]:
        found = {p[len(self.root) + 1 :]: p for p in self.fs.find(self.root)}
        return {rel: self.fs.cat_file(p).decode() for rel, p in found.items() if ".deploy" not in rel}

    def changed(self, rel: str) -> float:
        info = self.fs.info(f"{self.root}/{rel}")
        return float(info.get("mtime") or info["LastModified"].timestamp())

    def landed(self, model: str) -> list[tuple[str, str]]:
        """The writes to the model's published place, in order (staging excluded): each
        call and the path it wrote, relative to the model dir."""
        place = f"{self.root}/{model}"
        return [
            (write[0], written(write)[len(place) + 1 :] or "<the whole model dir>")
            for write in self.writes
            if written(write) == place or written(write).startswith(f"{place}/")
        ]


def written(write: tuple[str, ...]) -> str:
    """The path a recorded call writes: the second argument of put_file/copy/mv, else the first."""
    return write[2] if write[0] in ("put_file", "copy", "mv") else write[1]


@pytest.fixture(params=["local", "s3"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Target]:
    server = None
    if request.param == "local":
        dest: Path | str = tmp_path / "published"
    else:
        server = S3Server().start()
        server.client().create_bucket(Bucket=BUCKET)
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        dest = f"s3://{BUCKET}/repo"
    where = destination(dest)
    found = Target(dest, where.fs, where.root, where.local)
    real: Callable[[Path | str], publishing.Destination] = publishing.destination

    def recorded(to: Path | str) -> publishing.Destination:
        at = real(to)
        return dataclasses.replace(at, fs=Recording(at.fs, found.writes))

    monkeypatch.setattr(publishing, "destination", recorded)
    real_rename = faults.rename

    def renamed(source: os.PathLike[str] | str, to: os.PathLike[str] | str) -> None:
        found.writes.append(("mv", str(source), str(to)))  # a local publish's renames: no fsspec call
        real_rename(source, to)

    monkeypatch.setattr(faults, "rename", renamed)
    try:
        yield found
    finally:
        if server is not None:
            server.stop()


def tree(store: Store, root: Path, files: dict[str, str]) -> Output:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return store.ingest(root, ArtifactKind.TREE)


def test_first_publish_writes_every_file_then_a_rerun_touches_nothing(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    output = tree(store, tmp_path / "w1", FILES)
    assert sorted(publish(store, output, target.dest, "m").written) == ["m_onnx", "m_py"]
    assert target.files() == FILES  # and no staging leftovers
    before = {rel: target.changed(rel) for rel in FILES}
    target.writes.clear()
    assert publish(store, output, target.dest, "m").written == []
    assert target.writes == []
    assert {rel: target.changed(rel) for rel in FILES} == before


def test_a_changed_model_is_replaced_whole_and_the_unchanged_one_kept(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    publish(store, tree(store, tmp_path / "w1", FILES), target.dest, "m")
    target.writes.clear()
    changed = {k: v for k, v in FILES.items() if not k.startswith("m_onnx/1/")}
    changed |= {"m_onnx/2/model.onnx": "new", "m_onnx/config.pbtxt": "name: 'm_onnx' # v2"}
    assert publish(store, tree(store, tmp_path / "w2", changed), target.dest, "m").written == ["m_onnx"]
    assert target.files() == changed  # version 1's files are gone
    assert target.writes and not [w for w in target.writes if any("m_py" in p for p in w[1:])]


def test_a_model_missing_a_file_or_with_a_resized_one_is_rewritten(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    output = tree(store, tmp_path / "w1", FILES)
    publish(store, output, target.dest, "m")
    target.fs.rm_file(f"{target.root}/m_onnx/1/model.onnx")
    target.fs.pipe_file(f"{target.root}/m_py/1/model.py", b"x = 1 + 1")
    assert sorted(publish(store, output, target.dest, "m").written) == ["m_onnx", "m_py"]
    assert target.files() == FILES


def test_stale_models_of_this_pipeline_go_and_another_pipelines_stay(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    publish(store, tree(store, tmp_path / "w1", FILES), target.dest, "m")
    theirs = {"other_onnx/config.pbtxt": "name: 'other_onnx'"}
    publish(store, tree(store, tmp_path / "w2", theirs), target.dest, "other")
    only_onnx = {k: v for k, v in FILES.items() if k.startswith("m_onnx/")}
    assert publish(store, tree(store, tmp_path / "w3", only_onnx), target.dest, "m").written == []
    assert target.files() == only_onnx | theirs
    assert ("rm", f"{target.root}/m_py") in target.writes


def test_a_model_lands_whole_its_root_files_after_its_versions(tmp_path: Path, target: Target) -> None:
    """A polling server reads a model's config at its root: it must never see a model
    half-written. Locally the staged dir is renamed into place in one step; on object
    storage the files are copied in, version files first, root files after, stamp last."""
    store = Store(tmp_path / "cache")
    publish(store, tree(store, tmp_path / "w1", FILES), target.dest, "m")
    landed = target.landed("m_onnx")
    if target.local:
        assert landed == [("mv", "<the whole model dir>")], target.writes
        return
    assert {op for op, _ in landed} == {"copy"}, landed  # nothing is written there directly
    order = [rel for _, rel in landed]
    model = sorted(k.removeprefix("m_onnx/") for k in FILES if k.startswith("m_onnx/"))
    assert sorted(order) == sorted([*model, STAMP])
    root_files = [rel for rel in order if "/" not in rel]
    assert all("/" in rel for rel in order[: -len(root_files)]), order  # versions first
    assert order[-1] == STAMP, order


def test_in_order_puts_files_in_subdirs_before_the_model_dirs_own() -> None:
    files = {"config.pbtxt": 0, "2/model.onnx": 0, "1/model.onnx.data": 0, "0_labels.txt": 0}
    assert in_order(files) == ["1/model.onnx.data", "2/model.onnx", "0_labels.txt", "config.pbtxt"]


def test_a_failed_publish_names_the_destination(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    output = tree(store, tmp_path / "w1", FILES)
    if target.local:
        (tmp_path / "a_file").write_text("not a directory")  # (root ignores directory modes)
        broken: Path | str = tmp_path / "a_file" / "published"
    else:
        broken = "s3://no-such-bucket/repo"
    with pytest.raises(EnvError, match=f"publishing the repository to {broken} failed"):
        publish(store, output, broken, "m")


def test_the_stamp_is_a_typed_record_that_round_trips() -> None:
    stamp = Stamp("m", {"1/model.onnx": ("ab" * 32, 5), "config.pbtxt": ("cd" * 32, 7)})
    text = stamp.to_json()
    assert json.loads(text)["schema"] == SCHEMA == stamp.schema
    assert Stamp.from_json(text) == stamp
    legacy = {k: v for k, v in json.loads(text).items() if k != "schema"}
    assert Stamp.from_json(json.dumps(legacy)) == stamp
    assert Stamp.from_json(json.dumps({**json.loads(text), "schema": SCHEMA + 1})) is None
    assert Stamp.from_json(b"not json") is None
    assert Stamp.from_json("[]") is None


@pytest.mark.parametrize(("umask", "dirs", "files"), [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_published_local_dirs_get_the_umask_modes(tmp_path: Path, umask: int, dirs: int, files: int) -> None:
    store = Store(tmp_path / "cache")
    output = tree(store, tmp_path / "work" / "repository", FILES)
    old = os.umask(umask)
    try:
        publish(store, output, tmp_path / "published", "m")
    finally:
        os.umask(old)
    found = {
        p.relative_to(tmp_path / "published"): stat.S_IMODE(p.stat().st_mode)
        for p in (tmp_path / "published").rglob("*")
    }
    assert {str(p) for p in found} >= {"m_onnx", "m_onnx/1", "m_onnx/1/model.onnx", "m_py/1/model.py"}
    wrong = {
        str(p): oct(m)
        for p, m in found.items()
        if m != (dirs if (tmp_path / "published" / p).is_dir() else files)
    }
    assert not wrong, wrong
    assert json.loads((tmp_path / "published" / "m_py" / STAMP).read_text())["pipeline"] == "m"
