"""What this machine runs models on, read without importing a runtime: the GPU (from
nvidia-smi) and the installed TensorRT. Both enter the keys of the stages whose results
depend on them (engines, timings)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

from deploy.pipeline.graph.keys import dist_version

# Every distribution name TensorRT has shipped its Python package under.
TRT_DISTRIBUTIONS = (
    "tensorrt",
    "tensorrt-cu13",
    "tensorrt-cu12",
    "tensorrt-cu13-bindings",
    "tensorrt-cu12-bindings",
)


def tensorrt_version() -> str | None:
    return next((v for d in TRT_DISTRIBUTIONS if (v := dist_version(d))), None)


def gpu_identity() -> str | None:
    """'NVIDIA H100 80GB HBM3 (sm 9.0)' from nvidia-smi, or None without a GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader", "--id=0"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    name, _, cc = out.partition(",")
    return f"{name.strip()} (sm {cc.strip()})" if out else None


def host_identity() -> dict[str, str | int | None]:
    """CPU model, core count and GPU: what timings depend on (in the measuring stages' keys)."""
    return {"host_cpu": _cpu_model(), "host_cores": os.cpu_count(), "host_gpu": gpu_identity()}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()
