"""The serving layouts agree with themselves and with Triton: one entry per serving format,
platforms that map back, config.pbtxt type names Triton's ModelConfig knows for every
config dtype, and the python model reading the file its layout names."""

from __future__ import annotations

from typing import get_args

import pytest

from deploy.serving.layout import (
    BY_PLATFORM,
    LAYOUTS,
    PYTHON_MODEL,
    TRITON_TYPES,
    ServingFormat,
    io_name,
)
from deploy.spec.tensors import DType


def test_one_layout_per_serving_format_and_platforms_map_back() -> None:
    """Every platform maps back to its format, except the python backend's other formats
    (python_openvino, python_inductor), which the config's deploy_format parameter names."""
    assert set(LAYOUTS) == set(ServingFormat)
    assert all(layout.fmt == fmt for fmt, layout in LAYOUTS.items())
    others = ("python_openvino", "python_inductor")
    first = {fmt: layout for fmt, layout in LAYOUTS.items() if fmt not in others}
    assert {p: layout.fmt for p, layout in BY_PLATFORM.items()} == {
        layout.platform: fmt for fmt, layout in first.items()
    }
    assert len(BY_PLATFORM) == len(LAYOUTS) - 2 and BY_PLATFORM["python"].fmt == "python"
    assert LAYOUTS["python_openvino"].platform == LAYOUTS["python_inductor"].platform == "python"


def test_type_names_are_triton_model_config_types_for_every_config_dtype() -> None:
    from tritonclient.grpc import model_config_pb2

    assert set(TRITON_TYPES) == set(get_args(DType))
    assert set(TRITON_TYPES.values()) <= set(model_config_pb2.DataType.keys())
    assert (TRITON_TYPES["float32"], TRITON_TYPES["bfloat16"], TRITON_TYPES["bool"]) == (
        "TYPE_FP32",
        "TYPE_BF16",
        "TYPE_BOOL",
    )


def test_the_python_model_loads_the_files_its_layouts_name() -> None:
    assert PYTHON_MODEL.is_file() and PYTHON_MODEL.name == "python_model.py"
    source = PYTHON_MODEL.read_text()
    assert "class TritonPythonModel" in source
    for fmt in ("python", "python_openvino"):
        assert LAYOUTS[fmt].python_model == PYTHON_MODEL
        assert f'"{LAYOUTS[fmt].model_file}"' in source
    compile(source, str(PYTHON_MODEL), "exec")  # valid Python for the backend's interpreter


@pytest.mark.parametrize(
    ("fmt", "names"),
    [
        ("torchscript", ["input__0", "mask__1", "out__2"]),
        ("onnx", ["input", "mask", "out"]),
        ("python", ["input", "mask", "out"]),
        ("plan", ["input", "mask", "out"]),
    ],
)
def test_only_libtorch_names_tensors_by_position(fmt: str, names: list[str]) -> None:
    assert [io_name(fmt, n, i) for i, n in enumerate(["input", "mask", "out"])] == names
