"""A repository holds each distinct file once: the same model under two formats is one
inode (a hard link), except an ONNX model's external weights, which `onnx.load` refuses to
read through a file with more than one link ("a potential hardlink attack"); where links
fail, copies."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploy.pipeline.graph.contract import ArtifactKind
from deploy.pipeline.publish.tree import publish
from deploy.pipeline.store.objects import Store
from deploy.pipeline.store.once import Once, linkable

WEIGHT = np.arange(12, dtype=np.float32).reshape(3, 4)


def external_model(folder: Path) -> None:
    """y = x @ W with W in model.onnx.data (a real external-data file)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(WEIGHT, "w")],
    )
    folder.mkdir(parents=True)
    onnx.save(
        helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]),
        str(folder / "model.onnx"),
        save_as_external_data=True,
        location="model.onnx.data",
        size_threshold=0,
    )


def repository(root: Path) -> Path:
    """Two formats serving one ONNX model with external data, two serving one IR."""
    for model in ("m_onnx", "m_python"):
        external_model(root / model / "1")
        (root / model / "config.pbtxt").write_text(f"name: '{model}'")
    for model in ("m_openvino", "m_python_openvino"):
        (root / model / "1").mkdir(parents=True)
        (root / model / "1" / "model.xml").write_text("<net/>")
        (root / model / "1" / "model.bin").write_bytes(b"\x01" * 4096)
    return root


def inode(path: Path) -> tuple[int, int]:
    return path.stat().st_ino, path.stat().st_nlink


def check_layout(where: Path) -> None:
    import onnxruntime as ort

    assert inode(where / "m_onnx/1/model.onnx")[0] == inode(where / "m_python/1/model.onnx")[0]
    assert inode(where / "m_openvino/1/model.bin")[0] == inode(where / "m_python_openvino/1/model.bin")[0]
    assert inode(where / "m_openvino/1/model.xml")[0] == inode(where / "m_python_openvino/1/model.xml")[0]
    for model in ("m_onnx", "m_python"):
        assert inode(where / model / "1/model.onnx.data")[1] == 1  # its own copy, one link
        loaded = onnx.load(str(where / model / "1/model.onnx"))  # refuses a linked data file
        np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), WEIGHT)
        session = ort.InferenceSession(
            str(where / model / "1/model.onnx"), providers=["CPUExecutionProvider"]
        )
        x = np.ones((1, 3), np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ WEIGHT)


def test_the_published_repository_holds_each_shared_file_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    output = store.ingest(repository(tmp_path / "work"), ArtifactKind.TREE)
    publish(store, output, tmp_path / "published", "m")
    check_layout(tmp_path / "published")
    files = [f for f in (tmp_path / "published").rglob("*") if f.is_file()]
    distinct = {f.stat().st_ino: f.stat().st_size for f in files}
    assert sum(distinct.values()) == sum(f.stat().st_size for f in files) - len("<net/>") - 4096 - len(
        (tmp_path / "published/m_onnx/1/model.onnx").read_bytes()
    )


def test_the_cache_lays_its_trees_out_the_same_way(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    output = store.ingest(repository(tmp_path / "work"), ArtifactKind.TREE)
    check_layout(store.path_of(output))


def test_a_file_beside_an_onnx_model_is_never_linked_and_a_model_always_may_be() -> None:
    tree = ["a/1/model.onnx", "a/1/weights.bin", "b/1/model.xml", "b/1/model.bin", "c/config.pbtxt"]
    assert [linkable(rel, tree) for rel in tree] == [True, False, True, True, True]


def test_where_a_link_fails_the_file_is_copied(tmp_path: Path) -> None:
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on another file system than the tmp dir")
    once, written = Once(), []
    first = other / f"deploy-once-{os.getpid()}"
    try:
        first.write_bytes(b"x")
        assert not once.place("d", first, lambda: written.append(first), link=True)
        second = tmp_path / "second"
        assert not once.place(
            "d", second, lambda: (second.write_bytes(b"x"), written.append(second)), link=True
        )
        assert written == [first, second] and second.read_bytes() == b"x" and inode(first)[1] == 1
    finally:
        first.unlink(missing_ok=True)
