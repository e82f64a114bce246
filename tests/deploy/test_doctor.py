"""`deploy doctor` tells the truth about this machine."""

from __future__ import annotations

import json
import shutil

import pytest

from deploy.runtimes import host
from tests.helpers import real_tensorrt, run_cli


def test_doctor_json_matches_the_machine():
    proc = run_cli("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert checks["torch"]["ok"] and checks["onnxruntime"]["ok"] and checks["tritonserver"]["ok"]
    assert checks["tensorrt"]["ok"] == real_tensorrt()
    assert checks["gpu"]["ok"] == (shutil.which("nvidia-smi") is not None and checks["gpu"]["detail"] != "")
    if not checks["tensorrt"]["ok"]:
        assert "pip install tensorrt" in checks["tensorrt"]["fix"]
    # Every extra's packages have a row, with the version installed here.
    from importlib.metadata import version

    for name in ("openvino", "nncf", "matplotlib", "fsspec", "s3fs"):
        assert checks[name]["ok"] and checks[name]["detail"].startswith(version(name)), checks[name]


@pytest.mark.skipif(host.cuda_gpus() > 0, reason="this machine has an NVIDIA GPU")
def test_doctor_with_a_config_names_what_it_cannot_run_here(write_config):
    """With a config, each runtime that cannot run on the declared device here (cuda on a
    machine without a GPU) is a failed check saying why; on the CPU every one can, and one
    passed check says so."""
    bench = {"runtimes": ["eager", "onnxruntime"], "batches": [1]}
    found, paths = {}, {}
    for device in ("cpu", "cuda"):
        path = write_config(
            replace={"stages": {"export": {}, "bench": {**bench, "device": device}}}, name=f"{device}.yaml"
        )
        paths[device] = str(path)
        proc = run_cli("doctor", str(path), "--json")
        assert proc.returncode == 0, proc.stderr
        checks = json.loads(proc.stdout)
        found[device] = [
            (c["name"], c["ok"], c["detail"])
            for c in checks
            if c["name"] in ("stages.bench.runtimes", str(path))
        ]
    assert [(name, ok) for name, ok, _ in found["cpu"]] == [(paths["cpu"], True)]
    assert [(name, ok) for name, ok, _ in found["cuda"]] == [("stages.bench.runtimes", False)] * 2
    assert [detail.split(":")[0] for _, _, detail in found["cuda"]] == bench["runtimes"]
    assert all(
        "no NVIDIA GPU" in detail and detail.endswith("bench skips it") for _, _, detail in found["cuda"]
    )
