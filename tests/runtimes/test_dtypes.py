"""The one table of element types agrees with every party it translates for: the config's
DType names, numpy, ONNX Runtime's type strings (read from real sessions) and Triton's
datatypes (tritonclient's numpy mapping and config.pbtxt's enum)."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest

from deploy.runtimes import dtypes
from deploy.runtimes.dtypes import BY_ONNX, DTYPES, from_onnx, numpy_name, triton_name
from deploy.spec.tensors import DType


def test_the_table_lists_exactly_the_configs_dtypes_under_their_own_names() -> None:
    assert set(DTYPES) == set(get_args(DType))
    assert all(d.name == key for key, d in DTYPES.items())
    # Each column names each type once: the reverse lookups lose nothing.
    for column in ("onnx", "triton"):
        assert len({getattr(d, column) for d in DTYPES.values()}) == len(DTYPES), column
    assert len(BY_ONNX) == len(DTYPES)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_numpy_names_are_numpy_dtypes_and_only_bfloat16_is_widened(name: str) -> None:
    numpy = np.dtype(numpy_name(name))
    if name == "bfloat16":
        assert numpy == np.float32  # numpy has no bfloat16
    else:
        assert numpy == np.dtype(name)


def _identity_session(name: str):
    """A one-node ONNX model whose input has element type `name`, loaded by ORT."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    elem = {
        "float32": TensorProto.FLOAT,
        "float16": TensorProto.FLOAT16,
        "bfloat16": TensorProto.BFLOAT16,
        "float64": TensorProto.DOUBLE,
        "int64": TensorProto.INT64,
        "int32": TensorProto.INT32,
        "int16": TensorProto.INT16,
        "int8": TensorProto.INT8,
        "uint8": TensorProto.UINT8,
        "bool": TensorProto.BOOL,
    }[name]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", elem, [2])],
        [helper.make_tensor_value_info("y", elem, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_onnx_names_are_what_onnxruntime_reports_and_map_back(name: str) -> None:
    reported = _identity_session(name).get_inputs()[0].type
    assert reported == DTYPES[name].onnx
    assert from_onnx(reported) == name


def test_an_onnx_type_outside_the_table_reads_as_float32() -> None:
    assert from_onnx("tensor(string)") == "float32" and from_onnx("tensor(uint16)") == "float32"


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_triton_names_match_tritonclient_and_the_model_config_enum(name: str) -> None:
    from tritonclient.grpc import model_config_pb2
    from tritonclient.utils import np_to_triton_dtype

    triton = triton_name(name)
    assert f"TYPE_{triton}" in model_config_pb2.DataType.keys()
    # What tritonclient calls the numpy data: the same, except bfloat16 carried as float32.
    carried = np_to_triton_dtype(np.dtype(numpy_name(name)))
    assert carried == ("FP32" if name == "bfloat16" else triton)


def test_unknown_names_are_refused_not_guessed() -> None:
    with pytest.raises(KeyError):
        numpy_name("complex64")
    with pytest.raises(KeyError):
        dtypes.triton_name("uint16")
