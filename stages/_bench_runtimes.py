"""The runtimes the bench stage and `deploy bench` time: each becomes a zero-argument
call over fixed random inputs (and, on a GPU, a per-call H2D / compute / D2H record).
Heavy libraries are imported inside the functions that need them."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import DeployConfig
from pipeline.errors import ConfigError, Issue, StageFailed, first_line
from pipeline.stage import StageContext

if TYPE_CHECKING:
    from stages._bench_triton import Feed

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


@dataclass(frozen=True)
class Timed:
    call: Callable[[], Any]
    phases: list[tuple[float, float, float]] | None = None  # per call (ms), GPU runtimes only


# -- the bench stage: inputs from the shape spec -------------------------------------------------
def spec_feeds(config: DeployConfig, batch: int) -> dict[str, Any]:
    """Random inputs at the shape spec's opt shape, with the batch axis set to `batch`."""
    import numpy as np

    from stages._golden import random_input

    rng = np.random.default_rng(0)
    batched = config.batch_dim is not None
    return {s.name: random_input(s, (batch, *s.opt[1:]) if batched else s.opt, rng) for s in config.inputs}


def triton_feeds(config: DeployConfig, fmt: str, batch: int) -> list[Feed]:
    from stages._bench_triton import Feed
    from stages.triton_config import TRITON_TYPES, io_name

    feeds = spec_feeds(config, batch)
    return [
        Feed(io_name(fmt, s.name, i), feeds[s.name], TRITON_TYPES[s.dtype].removeprefix("TYPE_"))
        for i, s in enumerate(config.inputs)
    ]


def make(runtime: str, ctx: StageContext, feeds: dict[str, Any], device: str, threads: int | None) -> Timed:
    from stages.bench import ARTIFACT

    if runtime.startswith("onnxruntime"):
        return Timed(_ort_call(_ort_session(ctx.input(ARTIFACT[runtime]), threads, device), feeds))
    if runtime == "tensorrt":
        from stages import _bench_gpu

        return _bench_gpu.tensorrt(ctx.input("engine"), ctx.config, feeds)
    module = _torch_module(runtime, ctx, threads)
    if device == "cuda":
        from stages import _bench_gpu

        return _bench_gpu.torch_module(module, [feeds[s.name] for s in ctx.config.inputs])
    return Timed(_torch_call(module, [feeds[s.name] for s in ctx.config.inputs]))


def _torch_module(runtime: str, ctx: StageContext, threads: int | None) -> Any:
    import torch

    from stages._torch import load_model

    if threads:
        torch.set_num_threads(threads)
    if runtime == "eager":
        return load_model(ctx.config.model)
    return torch.jit.load(str(ctx.input("torchscript")), map_location="cpu").eval()


def _torch_call(module: Any, arrays: list[Any]) -> Callable[[], Any]:
    import torch

    args = [torch.from_numpy(a) for a in arrays]

    def call() -> Any:
        with torch.inference_mode():
            return module(*args)

    return call


def _ort_session(path: Path, threads: int | None, device: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    provider = "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider"
    if provider not in ort.get_available_providers():
        raise StageFailed(f"device: cuda needs onnxruntime-gpu; this onnxruntime has {ort.get_available_providers()}")
    try:
        return ort.InferenceSession(str(path), options, providers=[provider])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail / InvalidGraph / ... types
        raise StageFailed(f"ONNX Runtime cannot load {path}: {first_line(exc)}") from exc


def _ort_call(sess: Any, feeds: dict[str, Any]) -> Callable[[], Any]:
    names = [o.name for o in sess.get_outputs()]
    return lambda: sess.run(names, feeds)


# -- `deploy bench FILE`: inputs from --shapes or the model -------------------------------------
def onnxruntime(path: Path, shapes: dict[str, tuple[int, ...]], threads: int | None) -> tuple[Callable[[], Any], int]:
    import numpy as np

    sess = _ort_session(path, threads, "cpu")
    feeds = {i.name: _random(np, _shape(i.name, i.shape, shapes), ORT_TYPES.get(i.type, "float32")) for i in sess.get_inputs()}
    _unknown(shapes, feeds)
    return _ort_call(sess, feeds), _batch(feeds)


def torchscript(path: Path, shapes: dict[str, tuple[int, ...]], threads: int | None) -> tuple[Callable[[], Any], int]:
    import numpy as np
    import torch

    if threads:
        torch.set_num_threads(threads)
    if not shapes:
        raise ConfigError("--shapes", [Issue("--shapes", "TorchScript files carry no input shapes: give --shapes NAME:DxD,...")])
    module = torch.jit.load(str(path), map_location="cpu").eval()
    arrays = [_random(np, shape, "float32") for shape in shapes.values()]
    return _torch_call(module, arrays), arrays[0].shape[0] if arrays[0].ndim else 1


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
