"""What this machine and install can run, answered without importing a heavy library, so
that `deploy validate` and `deploy plan` say it before a run, and bench skips the same
runtimes with the same words: a CUDA GPU from the NVIDIA driver's /proc entry (what
torch.cuda would find, without importing torch), the builds of torch and ONNX Runtime
from their installed distributions' metadata. Stdlib only."""

from __future__ import annotations

import re
from pathlib import Path

from deploy.domain.vocabulary import Precision
from deploy.pipeline.graph.keys import dist_version
from deploy.runtimes.base import Device

# One directory per GPU the NVIDIA driver sees (the driver creates it; containers see it too).
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
# ONNX Runtime's builds that hold the CUDA execution provider.
ORT_CUDA_BUILDS = ("onnxruntime-gpu", "onnxruntime-training")


def cuda_gpus() -> int:
    """NVIDIA GPUs the driver sees (0 without a driver)."""
    return sum(1 for _ in DRIVER_GPUS.iterdir()) if DRIVER_GPUS.is_dir() else 0


# Why a runtime cannot run on a device with this install (None: it can, as far as the
# install tells before loading anything): the plugins' `unavailable` hooks.


def no_gpu(device: Device) -> str | None:
    if device is Device.CPU or cuda_gpus():
        return None
    return f"device cuda: no NVIDIA GPU on this machine (no driver entry {DRIVER_GPUS})"


def tensorrt_cannot(device: Device) -> str | None:
    """TensorRT: its package (looked up, not imported) and a GPU."""
    import importlib.util

    if importlib.util.find_spec("tensorrt") is None:
        return "tensorrt is not installed (pip install tensorrt where NVIDIA's index is reachable)"
    return no_gpu(device)


def torch_cannot(device: Device) -> str | None:
    """PyTorch, TorchScript, AOTInductor: a GPU, and a CUDA build of torch."""
    if device is Device.CPU:
        return None
    torch = dist_version("torch") or ""
    if reason := no_gpu(device):
        return reason
    if torch.endswith("+cpu"):
        return f"device cuda: torch {torch} is a CPU-only build (install a CUDA build of torch)"
    return None


def ort_cannot(device: Device) -> str | None:
    """ONNX Runtime: a GPU, and a build with the CUDA execution provider."""
    if device is Device.CPU:
        return None
    if reason := no_gpu(device):
        return reason
    if any(dist_version(build) for build in ORT_CUDA_BUILDS):
        return None
    return (
        f"device cuda: onnxruntime {dist_version('onnxruntime') or '(absent)'} is the CPU build, "
        "without CUDAExecutionProvider (pip install onnxruntime-gpu in its place)"
    )


# The CPU flags of native reduced-precision arithmetic (/proc/cpuinfo); without one, torch
# emulates the precision in FP32 instructions: correct, and slower than FP32.
NATIVE_CPU = {Precision.BF16: ("avx512_bf16", "amx_bf16"), Precision.FP16: ("avx512_fp16", "amx_fp16")}
BF16_SM = (8, 0)  # CUDA GPUs compute bf16 from Ampere (sm 8.0) on
SM = re.compile(r"\(sm (\d+)\.(\d+)\)")


def lacks_native(precision: Precision, device: Device) -> str | None:
    """Why `device` has no native `precision` arithmetic (None: it has, or it is FP32)."""
    if device is Device.CUDA:
        return _gpu_lacks(precision)
    wanted = NATIVE_CPU.get(precision)
    if wanted is None or set(wanted) & _cpu_flags():
        return None
    return f"this CPU has no {precision} arithmetic (none of {', '.join(wanted)} in /proc/cpuinfo): torch emulates it, slower than FP32"


def _gpu_lacks(precision: Precision) -> str | None:
    from deploy.runtimes.devices import gpu_identity

    gpu = gpu_identity() or ""
    found = SM.search(gpu)
    if precision is Precision.BF16 and found and (int(found[1]), int(found[2])) < BF16_SM:
        return f"{gpu} has no bf16 arithmetic (sm 8.0 and later have)"
    return None


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {
        f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()
    }
