"""One table of element types: our config's names and what numpy, ONNX and Triton call
them. Light: no numpy import."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str  # as in the config (spec.tensors.DType)
    numpy: str  # numpy has no bfloat16: such data is float32, cast by the runtime
    onnx: str  # onnxruntime's NodeArg.type
    triton: str  # Triton's datatype; config.pbtxt spells it TYPE_<triton>


DTYPES = {
    d.name: d
    for d in (
        DType("float32", "float32", "tensor(float)", "FP32"),
        DType("float16", "float16", "tensor(float16)", "FP16"),
        DType("bfloat16", "float32", "tensor(bfloat16)", "BF16"),
        DType("float64", "float64", "tensor(double)", "FP64"),
        DType("int64", "int64", "tensor(int64)", "INT64"),
        DType("int32", "int32", "tensor(int32)", "INT32"),
        DType("int16", "int16", "tensor(int16)", "INT16"),
        DType("int8", "int8", "tensor(int8)", "INT8"),
        DType("uint8", "uint8", "tensor(uint8)", "UINT8"),
        DType("bool", "bool", "tensor(bool)", "BOOL"),
    )
}
BY_ONNX = {d.onnx: d for d in DTYPES.values()}


def numpy_name(name: str) -> str:
    return DTYPES[name].numpy


def triton_name(name: str) -> str:
    """Triton's datatype for a config or numpy dtype name (e.g. float32 -> FP32)."""
    return DTYPES[name].triton


def from_onnx(onnx_type: str) -> str:
    """Our name for an ONNX Runtime type string; float32 for one we do not know."""
    found = BY_ONNX.get(onnx_type)
    return found.name if found else "float32"
