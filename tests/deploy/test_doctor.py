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
