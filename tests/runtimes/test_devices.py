"""What timings depend on, read without importing a runtime: the GPU from nvidia-smi (none
without it), TensorRT's version from package metadata, the CPU and its cores."""

from __future__ import annotations

import json
import os
import re
import shutil
from importlib import metadata
from pathlib import Path

import pytest

from deploy.runtimes.devices import TRT_DISTRIBUTIONS, gpu_identity, host_identity, tensorrt_version


def test_without_nvidia_smi_there_is_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no nvidia-smi to find
    assert gpu_identity() is None
    assert host_identity()["host_gpu"] is None


def test_tensorrt_version_is_the_first_installed_distributions() -> None:
    installed = []
    for name in TRT_DISTRIBUTIONS:
        try:
            installed.append(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue
    assert tensorrt_version() == (installed[0] if installed else None)


def test_the_host_identity_names_cpu_cores_and_gpu() -> None:
    found = host_identity()
    assert set(found) == {"host_cpu", "host_cores", "host_gpu"}
    assert found["host_cores"] == os.cpu_count() and found["host_gpu"] == gpu_identity()
    assert isinstance(found["host_cpu"], str) and found["host_cpu"].strip()
    cpuinfo = Path("/proc/cpuinfo")
    names = (
        [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        if cpuinfo.exists()
        else []
    )
    if names:
        assert found["host_cpu"] == names[0]
    assert json.loads(json.dumps(found)) == found  # it goes into cache keys as it is


@pytest.mark.gpu
def test_a_gpu_is_named_with_its_compute_capability() -> None:
    assert shutil.which("nvidia-smi") is not None
    identity = gpu_identity()
    assert identity is not None and re.fullmatch(r".+ \(sm \d+\.\d+\)", identity), identity
