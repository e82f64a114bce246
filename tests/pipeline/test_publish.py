"""Publishing the repository out of the cache: one protocol, tested once against a local
directory and against a real S3 server (moto's, over HTTP)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.contract import ArtifactKind
from pipeline.errors import EnvError
from pipeline.publish import STAMP, destination, in_order, publish
from pipeline.store import Store
from tests.helpers import S3Server

BUCKET = "models"
FILES = {
    "m_onnx/config.pbtxt": "name: 'm_onnx'",
    "m_onnx/1/model.onnx": "bytes",
    "m_py/config.pbtxt": "name: 'm_py'",
    "m_py/1/model.py": "x = 1",
}


@dataclass
class Target:
    """A publish destination and a way to read what landed there."""

    dest: Path | str
    fs: Any
    root: str

    def files(self) -> dict[str, str]:
        found = {p[len(self.root) + 1 :]: p for p in self.fs.find(self.root)}
        return {rel: self.fs.cat_file(p).decode() for rel, p in found.items() if STAMP not in rel}

    def changed(self, rel: str) -> float:
        info = self.fs.info(f"{self.root}/{rel}")
        return float(info.get("mtime") or info["LastModified"].timestamp())


@pytest.fixture(params=["local", "s3"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Target]:
    if request.param == "local":
        where = destination(tmp_path / "published")
        yield Target(tmp_path / "published", where.fs, where.root)
        return
    server = S3Server().start()
    server.client().create_bucket(Bucket=BUCKET)
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    url = f"s3://{BUCKET}/repo"
    where = destination(url)
    yield Target(url, where.fs, where.root)
    server.stop()


def tree(store: Store, root: Path, files: dict[str, str]) -> Any:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return store.ingest(root, ArtifactKind.TREE)


def test_first_publish_writes_every_file_then_a_rerun_touches_nothing(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    output = tree(store, tmp_path / "w1", FILES)
    assert sorted(publish(store, output, target.dest, "m")) == ["m_onnx", "m_py"]
    assert target.files() == FILES
    before = {rel: target.changed(rel) for rel in FILES}
    assert publish(store, output, target.dest, "m") == []
    assert {rel: target.changed(rel) for rel in FILES} == before


def test_a_changed_model_is_replaced_whole_and_the_unchanged_one_kept(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    publish(store, tree(store, tmp_path / "w1", FILES), target.dest, "m")
    kept = target.changed("m_py/1/model.py")
    changed = {k: v for k, v in FILES.items() if k != "m_onnx/1/model.onnx"} | {"m_onnx/2/model.onnx": "new"}
    assert publish(store, tree(store, tmp_path / "w2", changed), target.dest, "m") == ["m_onnx"]
    assert target.files() == changed  # version 1's file is gone
    assert target.changed("m_py/1/model.py") == kept


def test_stale_models_of_this_pipeline_go_and_another_pipelines_stay(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    publish(store, tree(store, tmp_path / "w1", FILES), target.dest, "m")
    theirs = {"other_onnx/config.pbtxt": "name: 'other_onnx'"}
    publish(store, tree(store, tmp_path / "w2", theirs), target.dest, "other")
    only_onnx = {k: v for k, v in FILES.items() if k.startswith("m_onnx/")}
    publish(store, tree(store, tmp_path / "w3", only_onnx), target.dest, "m")
    assert target.files() == only_onnx | theirs


def test_version_files_come_before_the_models_own_files() -> None:
    """A polling server reads config.pbtxt at the model's root: it must land last."""
    files = {"config.pbtxt": 0, "2/model.onnx": 0, "1/model.onnx.data": 0, "0_labels.txt": 0}
    assert in_order(files) == ["1/model.onnx.data", "2/model.onnx", "0_labels.txt", "config.pbtxt"]


def test_a_failed_publish_names_the_destination(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "cache")
    output = tree(store, tmp_path / "w1", FILES)
    if isinstance(target.dest, Path):
        target.dest.parent.chmod(0o500)  # no new directory can be made there
        broken: Path | str = target.dest
    else:
        broken = "s3://no-such-bucket/repo"
    try:
        if isinstance(broken, Path) and os.geteuid() == 0:
            broken = Path("/proc/deploy-cannot-write-here")  # root ignores modes
        with pytest.raises(EnvError, match=f"publishing the repository to {broken} failed"):
            publish(store, output, broken, "m")
    finally:
        (tmp_path).chmod(0o700)


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
