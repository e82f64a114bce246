"""ONNX Runtime's CUDA execution provider as a runtime of its own: the FP32 ONNX file on
the GPU, whatever bench.device says; on a machine without a GPU or without the
onnxruntime-gpu build it is skipped with the reason, before the run and in bench."""

from __future__ import annotations

from deploy.domain.vocabulary import Precision
from deploy.runtimes.base import Device
from deploy.runtimes.host import ort_cannot
from deploy.runtimes.plugin import Family, RuntimePlugin
from deploy.runtimes.plugins.onnx_plugins import FORMATS, bench_hook, file_on, parity_on

PLUGIN = RuntimePlugin(
    "onnxruntime_cuda",
    "onnx",
    Family.ONNX,
    Precision.FP32,
    FORMATS,
    device=Device.CUDA,
    unavailable=ort_cannot,
    bench=bench_hook("onnxruntime_cuda", "onnx"),
    parity=parity_on(Device.CUDA),
    open_file=file_on(Device.CUDA),
    suffixes=(".onnx",),
    by_suffix=False,  # `deploy bench model.onnx --runtime onnxruntime_cuda`
)
