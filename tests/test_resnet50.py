"""End to end: configs/resnet50.yaml through the CLI, cold then warm (CPU, ~1 min)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_cli
from tests.stages.test_build import real_tensorrt


@pytest.mark.slow
@pytest.mark.triton
def test_resnet50_cold_then_fully_cached(tmp_path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = ROOT / "configs" / "resnet50.yaml"
    cold = run_cli("run", str(config), cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "resnet50" / "summary.json").read_text())
    states = {s["stage"]: s["status"] for s in summary["stages"]}
    expected_build = "ran" if real_tensorrt() else "skipped"
    assert states.pop("build") == expected_build and set(states.values()) == {"ran"} and len(states) == 8
    validate = next(s for s in summary["stages"] if s["stage"] == "validate")
    assert validate["metrics"]["parity"]["onnxruntime"]["passed"]
    smoke = next(s for s in summary["stages"] if s["stage"] == "smoke")["metrics"]["smoke"]["models"]
    assert smoke["resnet50_python"]["status"] == "passed"
    for protocol in ("http", "grpc"):
        assert smoke["resnet50_python"]["protocols"][protocol]["max"]["logits"]["passed"]
    assert smoke["resnet50_onnx"]["status"] == "skipped"  # the wheel's server has no onnxruntime backend
    assert smoke["resnet50_python_int8"]["status"] == "passed"
    quantize = next(s for s in summary["stages"] if s["stage"] == "quantize")["metrics"]["accuracy"]
    assert quantize["outputs"]["logits"]["cosine"] >= 0.99
    bench = next(s for s in summary["stages"] if s["stage"] == "bench")["metrics"]["bench"]
    assert {(r["runtime"], r["batch"]) for r in bench} == {(rt, b) for rt in ("eager", "torchscript", "onnxruntime", "onnxruntime_int8") for b in (1, 8)}
    for model in ("resnet50_onnx", "resnet50_torchscript", "resnet50_python"):
        text = (tmp_path / "model_repository" / model / "config.pbtxt").read_text()
        parsed = text_format.Parse(text, model_config_pb2.ModelConfig())
        assert parsed.max_batch_size == 32 and list(parsed.input[0].dims) == [3, 224, 224]
        assert list(parsed.output[0].dims) == [1000]
    warm = run_cli("run", str(config), cwd=tmp_path)
    assert warm.returncode == 0
    summary = json.loads((tmp_path / "runs" / "resnet50" / "summary.json").read_text())
    states = {s["stage"]: s["status"] for s in summary["stages"]}
    assert states.pop("build") == ("cached" if real_tensorrt() else "skipped") and set(states.values()) == {"cached"}
