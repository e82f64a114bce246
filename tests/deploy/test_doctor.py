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
    # The runtime row agrees with the package row (it said yes without TensorRT or a GPU).
    assert checks["runtime tensorrt"]["ok"] == (real_tensorrt() and host.cuda_gpus() > 0)
    if not real_tensorrt():
        assert checks["runtime tensorrt"]["detail"].startswith("tensorrt is not installed")
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


def test_doctor_with_a_config_names_a_package_its_model_needs_and_lacks(tmp_path):
    """The model file imports a package this machine lacks: a failed `model` row naming it
    and how to install it (read from the file, not run); with it present, none."""
    (tmp_path / "m.py").write_text(
        "import torch\nimport absent_weights_pkg\n\ndef build():\n    return torch.nn.Linear(4, 2)\n"
    )
    config = {
        "name": "needs",
        "model": {"file": "m.py", "callable": "build"},
        "inputs": [
            {
                "name": "x",
                "dtype": "float32",
                "dims": ["batch", 4],
                "min": [1, 4],
                "opt": [2, 4],
                "max": [4, 4],
            }
        ],
        "outputs": [{"name": "y"}],
        "stages": {"trace": {}},
    }
    import yaml

    (tmp_path / "needs.yaml").write_text(yaml.safe_dump(config))
    proc = run_cli("doctor", str(tmp_path / "needs.yaml"), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {c["name"]: c for c in json.loads(proc.stdout)}
    assert not rows["model"]["ok"] and "the package 'absent_weights_pkg'" in rows["model"]["detail"]
    assert rows["model"]["fix"].startswith("pip install absent_weights_pkg")
    (tmp_path / "absent_weights_pkg.py").write_text("")  # beside the model file: found
    rows = {
        c["name"]: c for c in json.loads(run_cli("doctor", str(tmp_path / "needs.yaml"), "--json").stdout)
    }
    assert "model" not in rows and rows[str(tmp_path / "needs.yaml")]["ok"]
