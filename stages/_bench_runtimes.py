"""Runtimes `deploy bench` can time a model file in: ONNX Runtime (.onnx) and
TorchScript (.pt / .ts). Each returns a zero-argument call over fixed random inputs."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError, Issue

SHAPE = re.compile(r"^([A-Za-z_][\w.:/-]*):(\d+(?:x\d+)*)$")
ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
             "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool"}


def parse_shapes(text: str | None) -> dict[str, tuple[int, ...]]:
    """trtexec's --shapes: `input:8x3x224x224,mask:8x128`."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in filter(None, (text or "").split(",")):
        match = SHAPE.match(item.strip())
        if match is None:
            raise ConfigError("--shapes", [Issue("--shapes", f"'{item}' is not NAME:DxDxD (e.g. input:1x3x224x224)")])
        shapes[match.group(1)] = tuple(int(d) for d in match.group(2).split("x"))
    return shapes


def onnxruntime(path: Path, shapes: dict[str, tuple[int, ...]], threads: int | None) -> tuple[Callable[[], Any], int]:
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: _random(np, _shape(i.name, i.shape, shapes), ORT_TYPES.get(i.type, "float32")) for i in sess.get_inputs()}
    _unknown(shapes, feeds)
    names = [o.name for o in sess.get_outputs()]
    return (lambda: sess.run(names, feeds)), _batch(feeds)


def torchscript(path: Path, shapes: dict[str, tuple[int, ...]], threads: int | None) -> tuple[Callable[[], Any], int]:
    import numpy as np
    import torch

    if threads:
        torch.set_num_threads(threads)
    if not shapes:
        raise ConfigError("--shapes", [Issue("--shapes", "TorchScript files carry no input shapes: give --shapes NAME:DxD,...")])
    module = torch.jit.load(str(path), map_location="cpu").eval()
    args = [torch.from_numpy(_random(np, shape, "float32")) for shape in shapes.values()]

    def call() -> Any:
        with torch.inference_mode():
            return module(*args)

    return call, args[0].shape[0] if args[0].dim() else 1


def _shape(name: str, declared: list[Any], given: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    if name in given:
        return given[name]
    if all(isinstance(d, int) for d in declared):
        return tuple(declared)
    raise ConfigError("--shapes", [Issue("--shapes", f"input '{name}' has dynamic dims {declared}: give --shapes {name}:DxD...")])


def _unknown(given: dict[str, tuple[int, ...]], feeds: dict[str, Any]) -> None:
    extra = sorted(set(given) - set(feeds))
    if extra:
        raise ConfigError("--shapes", [Issue("--shapes", f"the model has no input(s) {extra} (inputs: {sorted(feeds)})")])


def _random(np: Any, shape: tuple[int, ...], dtype: str) -> Any:
    rng = np.random.default_rng(0)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _batch(feeds: dict[str, Any]) -> int:
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if first.ndim else 1
