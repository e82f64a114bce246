"""`deploy doctor` tells the truth about this machine."""

from __future__ import annotations

import json
import shutil

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


def test_doctor_with_a_config_names_what_it_cannot_run_here(write_config):
    """With a config, each runtime this install cannot run on the declared device is a
    failed check saying why; on CPU every runtime can, and one passed check says so."""
    from deploy.domain.vocabulary import Runtime
    from deploy.runtimes.base import Device
    from deploy.runtimes.host import cannot_run

    bench = {"runtimes": ["eager", "onnxruntime"], "batches": [1]}
    for device in ("cpu", "cuda"):
        path = write_config(
            replace={"stages": {"export": {}, "bench": {**bench, "device": device}}}, name=f"{device}.yaml"
        )
        proc = run_cli("doctor", str(path), "--json")
        assert proc.returncode == 0, proc.stderr
        found = [c for c in json.loads(proc.stdout) if c["name"] in ("stages.bench.runtimes", str(path))]
        expected = [cannot_run(Runtime(r), Device(device)) for r in bench["runtimes"]]
        if not any(expected):
            assert [(c["name"], c["ok"]) for c in found] == [(str(path), True)]
        else:
            assert [c["detail"] for c in found] == [
                f"{r}: {why}; bench skips it" for r, why in zip(bench["runtimes"], expected) if why
            ]
            assert not any(c["ok"] for c in found)
