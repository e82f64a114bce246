"""ONNX Runtime in process, on the CPU at each precision the pipeline makes (FP32, the
quantize stage's INT8, the fp16 stage's FP16). Its hooks take the device, so another
execution provider's plugin is a declaration over them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.domain.artifacts import ONNX
from deploy.domain.vocabulary import ModelSuffix, Precision, ServingFormat
from deploy.runtimes.base import Device, Feeds
from deploy.runtimes.host import ort_cannot
from deploy.runtimes.plugin import (
    BenchHook,
    Family,
    FileHook,
    Made,
    ParityHook,
    RuntimePlugin,
    Shapes,
    batch_of,
    random_feeds,
)

if TYPE_CHECKING:
    from deploy.pipeline.graph.contract import StageContext
    from deploy.runtimes.base import Session
    from deploy.runtimes.timing import Timed

FORMATS = (ServingFormat.ONNX, ServingFormat.PYTHON)  # Triton's onnxruntime backend, or the python one


def bench_hook(name: str, artifact: str) -> BenchHook:
    def bench(ctx: StageContext, feeds: Feeds, device: Device, threads: int | None) -> Timed:
        from deploy.runtimes.onnxrt import OnnxRuntime

        session = OnnxRuntime(ctx.input(artifact), device, threads)
        ctx.record(f"{name}_settings", session.settings())
        return session.timed(feeds)

    return bench


def parity_on(device: Device) -> ParityHook:
    def parity(ctx: StageContext) -> Session:
        from deploy.runtimes.onnxrt import OnnxRuntime

        return OnnxRuntime(ctx.input(ONNX), device, outputs=ctx.config.output_names())

    return parity


def file_on(device: Device) -> FileHook:
    def open_file(path: Path, shapes: Shapes, threads: int | None, hint: str) -> Made:
        from deploy.runtimes.onnxrt import OnnxRuntime

        model = OnnxRuntime(path, device, threads)
        feeds = random_feeds(model.input_types(), shapes)
        return Made(model.timed(feeds).call, batch_of(feeds), model.settings())

    return open_file


def _load(path: Path, outputs: Sequence[str] | None, precision: str) -> Any:
    from deploy.runtimes.onnxrt import OnnxRuntime

    return OnnxRuntime(path, outputs=outputs)


def onnxruntime(precision: Precision, suffix: str = "") -> RuntimePlugin:
    """ONNX Runtime on the CPU over the ONNX file of one precision."""
    name, artifact = f"onnxruntime{suffix}", f"onnx{suffix}"
    fp32 = not suffix
    return RuntimePlugin(
        name,
        artifact,
        Family.ONNX,
        precision,
        FORMATS,
        accuracy=None if fp32 else f"accuracy{suffix}",
        unavailable=ort_cannot,
        bench=bench_hook(name, artifact),
        parity=parity_on(Device.CPU) if fp32 else None,
        open_file=file_on(Device.CPU) if fp32 else None,
        load_file=_load if fp32 else None,
        suffixes=(ModelSuffix.ONNX,) if fp32 else (),
    )


ALL = (
    onnxruntime(Precision.FP32),
    onnxruntime(Precision.INT8, "_int8"),
    onnxruntime(Precision.FP16, "_fp16"),
)
