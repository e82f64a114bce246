"""Publishing the repository out of the cache: modes any reader can use."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pipeline.publish import publish_tree
from pipeline.stage import ArtifactKind
from pipeline.store import Store


def tree(root: Path) -> Path:
    for rel, text in {
        "m_onnx/config.pbtxt": "name: 'm_onnx'",
        "m_onnx/1/model.onnx": "bytes",
        "m_py/1/model.py": "x = 1",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize(("umask", "dirs", "files"), [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_published_model_dirs_get_the_umask_modes(tmp_path, umask, dirs, files):
    store = Store(tmp_path / "cache")
    output = store.ingest(tree(tmp_path / "work" / "repository"), ArtifactKind.TREE)
    old = os.umask(umask)
    try:
        publish_tree(store, output, tmp_path / "published", "m")
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
