"""The OpenVINO runtime on a real IR: outputs are found by any of their names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def _label_model(path: Path) -> Path:
    """scores = x @ w; label = int32(argmax(scores)): the CPU plugin folds the Cast, and the
    port ends up named both `argmax` and `label`."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.arange(12, dtype=np.float32).tolist())
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["argmax"], axis=-1, keepdims=0),
        helper.make_node("Cast", ["argmax"], ["label"], to=TensorProto.INT32),
    ]
    graph = helper.make_graph(
        nodes,
        "labels",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("label", TensorProto.INT32, ["batch"]),
        ],
        [w],
    )
    onnx_path = path / "labels.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), onnx_path)
    import openvino as ov

    ov.save_model(ov.convert_model(str(onnx_path)), str(path / "model.xml"))
    return path / "model.xml"


def test_an_output_is_found_by_any_name_its_port_has(tmp_path: Path) -> None:
    """The openvino stage failed with "the OpenVINO model has no output(s) ['label'] (it has
    ['scores', 'argmax'])" on a label cast to int32, blocking every OpenVINO format."""
    from deploy.runtimes.openvinort import OpenVino

    runtime = OpenVino(_label_model(tmp_path), outputs=["scores", "label"])
    x = np.array([[1, 0, 0, 0], [0, 0, 0, -1]], dtype=np.float32)
    found = runtime.infer({"x": x})
    assert list(found) == ["scores", "label"]
    assert (
        found["label"].tolist()
        == np.argmax(x @ np.arange(12, dtype=np.float32).reshape(4, 3), axis=-1).tolist()
    )
    assert len(OpenVino(tmp_path / "model.xml").outputs) == 2  # asked for nothing: one name a port
