"""A generated repository as the smoke and bench stages see it: formats and precisions
read from each config.pbtxt, and which models a server with given backends can load."""

from __future__ import annotations

from pathlib import Path

from deploy.serving.layout import LAYOUTS, io_name
from deploy.serving.repository import loadable, models, private_copy, skip_reason


def write(repo: Path, name: str, platform_line: str, precision: str | None = None) -> None:
    (repo / name / "1").mkdir(parents=True)
    extra = (
        f'parameters: {{ key: "deploy_precision" value: {{ string_value: "{precision}" }} }}'
        if precision
        else ""
    )
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{platform_line}\n{extra}\n')


def test_models_are_read_from_their_configs(tmp_path: Path) -> None:
    write(tmp_path, "m_onnx", 'platform: "onnxruntime_onnx"')
    write(tmp_path, "m_python_int8", 'backend: "python"', precision="int8")
    write(tmp_path, "m_plan", 'platform: "tensorrt_plan"')
    write(tmp_path, "m_openvino", 'backend: "openvino"')
    # The python backend's second format is told apart by the parameter triton_config writes.
    write(
        tmp_path,
        "m_python_openvino",
        'backend: "python"\nparameters: { key: "deploy_format" value: { string_value: "python_openvino" } }',
    )
    found = models(tmp_path)
    assert {n: (m.fmt, m.backend, m.precision) for n, m in found.items()} == {
        "m_onnx": ("onnx", "onnxruntime", "fp32"),
        "m_python_int8": ("python", "python", "int8"),
        "m_plan": ("plan", "tensorrt", "fp32"),
        "m_openvino": ("openvino", "openvino", "fp32"),
        "m_python_openvino": ("python_openvino", "python", "fp32"),
    }
    assert loadable(found, {"python"}) == ["m_python_int8", "m_python_openvino"]
    assert loadable(found, None) == list(found)  # a server whose backends are unknown: try all
    assert skip_reason("tensorrt") == "the server has no 'tensorrt' backend"


def test_each_layout_names_its_backend_file_and_artifact() -> None:
    assert {f: (lay.backend, lay.model_file, lay.artifact) for f, lay in LAYOUTS.items()} == {
        "onnx": ("onnxruntime", "model.onnx", "onnx"),
        "torchscript": ("pytorch", "model.pt", "torchscript"),
        "python": ("python", "model.onnx", "onnx"),
        "openvino": ("openvino", "model.xml", "openvino"),
        "python_openvino": ("python", "model.xml", "openvino"),
        "plan": ("tensorrt", "model.plan", "engine"),
        "python_inductor": ("python", "model.pt2", "inductor"),
    }
    assert io_name("torchscript", "image", 0) == "image__0" and io_name("onnx", "image", 0) == "image"


def test_a_private_copy_keeps_writes_out_of_the_source(tmp_path: Path) -> None:
    write(tmp_path / "tree", "m_onnx", 'platform: "onnxruntime_onnx"')
    copy = private_copy(tmp_path / "tree", tmp_path / "copy")
    (copy / "m_onnx" / "__pycache__").mkdir()
    assert not (tmp_path / "tree" / "m_onnx" / "__pycache__").exists()
    assert (copy / "m_onnx" / "config.pbtxt").stat().st_ino == (
        tmp_path / "tree" / "m_onnx" / "config.pbtxt"
    ).stat().st_ino
