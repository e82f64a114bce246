"""What this machine and install can run, answered without importing a heavy library, so
that `deploy validate` and `deploy plan` say it before a run, and bench skips the same
runtimes with the same words: a CUDA GPU from the NVIDIA driver's /proc entry (what
torch.cuda would find, without importing torch), the builds of torch and ONNX Runtime
from their installed distributions' metadata. Stdlib only."""

from __future__ import annotations

from pathlib import Path

from deploy.domain.vocabulary import Runtime
from deploy.pipeline.keys import dist_version
from deploy.runtimes.base import Device
from deploy.runtimes.catalog import CATALOG, Family

# One directory per GPU the NVIDIA driver sees (the driver creates it; containers see it too).
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
# ONNX Runtime's builds that hold the CUDA execution provider.
ORT_CUDA_BUILDS = ("onnxruntime-gpu", "onnxruntime-training")
CUDA_FAMILIES = (Family.PYTORCH, Family.TORCHSCRIPT, Family.INDUCTOR, Family.ONNX)


def cuda_gpus() -> int:
    """NVIDIA GPUs the driver sees (0 without a driver)."""
    return sum(1 for _ in DRIVER_GPUS.iterdir()) if DRIVER_GPUS.is_dir() else 0


def cannot_run(runtime: Runtime, device: Device) -> str | None:
    """Why `runtime` cannot run on `device` with this install (None: it can, as far as
    the install tells before loading anything). Only bench.device decides these: OpenVINO
    rows run on the CPU, a TensorRT row on the GPU, whatever it says."""
    family = CATALOG[runtime].family
    if device is Device.CPU or family not in CUDA_FAMILIES:
        return None
    if not cuda_gpus():
        return f"device cuda: no NVIDIA GPU on this machine (no driver entry {DRIVER_GPUS})"
    if family is Family.ONNX:
        return _ort_cuda()
    torch = dist_version("torch") or ""
    if torch.endswith("+cpu"):
        return f"device cuda: torch {torch} is a CPU-only build (install a CUDA build of torch)"
    return None


def _ort_cuda() -> str | None:
    if any(dist_version(build) for build in ORT_CUDA_BUILDS):
        return None
    return (
        f"device cuda: onnxruntime {dist_version('onnxruntime') or '(absent)'} is the CPU build, "
        "without CUDAExecutionProvider (pip install onnxruntime-gpu in its place)"
    )
