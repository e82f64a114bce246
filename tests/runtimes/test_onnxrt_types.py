"""ONNX Runtime as a runtime beyond one float model (tests/runtimes/test_onnxrt.py): each
element type read from the file and fed back through `infer`, outputs chosen and ordered
by name, and a file or device it cannot use refused as a StageFailed naming why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from deploy.pipeline.errors import StageFailed
from deploy.runtimes.arrays import random_array
from deploy.runtimes.base import Device
from deploy.runtimes.onnxrt import OnnxRuntime
from tests.helpers import export_two_heads, two_heads_net

ELEMENT = {
    "float32": 1,  # onnx.TensorProto values
    "uint8": 2,
    "int8": 3,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
}


def identity(path: Path, dtype: str) -> Path:
    """x [n, 3] of `dtype` -> y, the same."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", ELEMENT[dtype], ["n", 3])],
        [helper.make_tensor_value_info("y", ELEMENT[dtype], ["n", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("dtype", sorted(ELEMENT))
def test_inputs_made_from_the_declared_types_run(tmp_path: Path, dtype: str) -> None:
    runtime = OnnxRuntime(identity(tmp_path / "m.onnx", dtype))
    assert runtime.input_types() == {"x": (["n", 3], dtype)}
    x = random_array((4, 3), dtype)
    y = runtime.infer({"x": x})["y"]
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)


@pytest.fixture(scope="module")
def two_heads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_two_heads(two_heads_net(), tmp_path_factory.mktemp("onnx") / "m.onnx")


def test_outputs_can_be_chosen_and_ordered(two_heads: Path) -> None:
    feeds = {"a": np.ones((2, 4), np.float32), "b": np.zeros((2, 4), np.float32)}
    both = OnnxRuntime(two_heads).infer(feeds)
    assert list(both) == ["mix", "gate"]  # the file's order by default
    reordered = OnnxRuntime(two_heads, outputs=["gate", "mix"])
    assert reordered.outputs == ("gate", "mix") and list(reordered.infer(feeds)) == ["gate", "mix"]
    only = OnnxRuntime(two_heads, outputs=["gate"]).infer(feeds)
    assert list(only) == ["gate"]
    np.testing.assert_array_equal(only["gate"], both["gate"])
    assert OnnxRuntime(two_heads, threads=1).infer(feeds)["mix"].shape == (2, 3)


def test_a_file_onnxruntime_cannot_load_is_named(tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07 this is not a protobuf model")
    with pytest.raises(StageFailed, match=f"^ONNX Runtime cannot load {path}: "):
        OnnxRuntime(path)


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime has CUDA"
)
def test_a_device_without_its_provider_is_refused_with_what_there_is(two_heads: Path) -> None:
    with pytest.raises(
        StageFailed, match=r"device cuda needs CUDAExecutionProvider; this onnxruntime has \["
    ):
        OnnxRuntime(two_heads, device=Device.CUDA)
