"""OpenVINO served: the CNN trained on scikit-learn's digits, its FP32 IR and NNCF's INT8
IR, written for Triton's openvino backend (a config parsed as ModelConfig; the embedded
server has no such backend, and smoke says so) and for OpenVINO inside the python backend
(loaded by the embedded tritonserver 2.51). Smoke checks both precisions over HTTP and
gRPC, with concurrent clients each sending their own digits, and the digit service (PNG
in, top-3 names out) over each; bench times them through the server and select weighs
them with the other formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.helpers import digits_service, run_cli

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def _config(tmp_path: Path, checkpoint: Path) -> Path:
    path, _truth = digits_service(tmp_path, checkpoint, count=6)
    data = yaml.safe_load(path.read_text())
    folder = checkpoint.parent
    real = {
        "calibration": {"kind": "arrays", "path": str(folder / "train.npy"), "count": 128},
        "holdout": {"kind": "arrays", "path": str(folder / "test.npy"), "count": 200},
        "gate": {"min_cosine": 0.99, "min_top1_agreement": 0.95},
    }
    fast = {"warmup_ms": 10, "duration_s": 0.1, "iterations": 5, "batches": [1, 16]}
    stages = data["stages"]
    stages.update(
        simplify={},
        openvino={},
        # NNCF's full bias correction: this CNN's INT8 is closer to FP32 with it.
        openvino_int8={**real, "fast_bias_correction": False},
        quantize=real,
        bench={
            **fast,
            "runtimes": [
                "onnxruntime",
                "onnxruntime_int8",
                "openvino",
                "openvino_int8",
                "openvino_bf16",
                "triton",
            ],
            "triton": {"concurrency": [1, 2], "server": {"kind": "auto"}},
        },
        select={"objectives": [{"name": "latency", "metric": "latency"}], "min_gain": 0},
    )
    stages["triton_config"].update(
        formats=["python", "python_openvino", "openvino"],
        precisions=["fp32", "int8", *(["bf16"] if _has_bf16() else [])],
    )
    stages["smoke"]["batching_requests"] = 24
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _has_bf16() -> bool:
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _stages(summary: Path) -> dict[str, Any]:
    return {s["stage"]: s for s in json.loads(summary.read_text())["stages"]}


@pytest.mark.matrix  # end to end (deployed, served, timed): `pytest -m matrix`, as .ci/run runs it after the README's command
def test_openvino_is_served_smoked_benched_and_weighed(tmp_path: Path, digits_checkpoint: Any) -> None:
    checkpoint, _ = digits_checkpoint
    config = _config(tmp_path, checkpoint)
    summary = tmp_path / "summary.json"
    done = run_cli("run", str(config), "--json", str(summary))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    stages = _stages(summary)
    repository = Path(stages["triton_config"]["outputs"]["repository"]["path"])
    _check_openvino_backend_config(repository)
    for name in ("tiny_python_openvino", "tiny_python_openvino_int8"):  # the IR and model.py beside it
        assert {p.name for p in (repository / name / "1").iterdir()} >= {"model.xml", "model.bin", "model.py"}

    smoke = json.loads(Path(stages["smoke"]["outputs"]["smoke"]["path"]).read_text())
    models = smoke["models"]
    for name in ("tiny_python_openvino", "tiny_python_openvino_int8"):
        assert models[name]["status"] == "passed", models[name]
        assert models[name]["format"] == "python_openvino"
        traffic = models[name]["traffic"]  # concurrent clients, each checked against its own answer
        assert traffic["clients"] >= 2 and traffic["mismatch_count"] == 0 and not traffic["mismatches"]
    assert models["tiny_python_openvino"]["reference"] == "eager PyTorch"
    assert models["tiny_python_openvino_int8"]["reference"] == "local OpenVINO on the served int8 file"
    if _has_bf16():  # the FP32 IR served computed in bf16, checked against OpenVINO's bf16 here
        bf16 = models["tiny_python_openvino_bf16"]
        assert bf16["status"] == "passed" and bf16["reference"] == "local OpenVINO on the served bf16 file"
        assert models["tiny_python_openvino_bf16_ensemble"]["status"] == "passed"
        config = (repository / "tiny_openvino_bf16" / "config.pbtxt").read_text()
        assert 'key: "HINT_BF16"' in config
    for name in ("tiny_openvino", "tiny_openvino_int8", "tiny_openvino_ensemble"):
        assert models[name]["status"] == "skipped" and "'openvino' backend" in models[name]["reason"]
    for name in ("tiny_python_openvino_ensemble", "tiny_python_openvino_int8_ensemble"):
        assert models[name]["status"] == "passed", models[name]

    bench = json.loads(Path(stages["bench"]["outputs"]["results"]["path"]).read_text())
    served = {r["model"] for r in bench["results"] if r["runtime"] == "triton"}
    assert {"tiny_python_openvino", "tiny_python_openvino_int8"} <= served
    hinted = [r for r in bench["results"] if r.get("hint") == "throughput"]
    assert {r["runtime"] for r in hinted} == {
        "openvino",
        "openvino_int8",
        *(["openvino_bf16"] if _has_bf16() else []),
    }
    chosen = stages["bench"]["metrics"]["openvino_throughput_settings"]
    assert chosen["hint"] == "THROUGHPUT" and chosen["streams"] >= 1 and chosen["requests"] >= 1
    assert stages["bench"]["metrics"]["onnxruntime_settings"]["graph_optimization"] == "ORT_ENABLE_ALL"

    selection = json.loads(Path(stages["select"]["outputs"]["selection"]["path"]).read_text())
    judged = {e["model"]: e for e in selection["objectives"][0]["candidates"] if e.get("model")}
    assert judged["tiny_python_openvino_int8"]["verdict"] in (
        "selected",
        "slower",
        "unstable",
        "contended",
        "implausible",
    )
    assert judged["tiny_openvino"]["verdict"] == "unverified"
    assert selection["accuracy"]["openvino_int8"] >= 0.99


def _check_openvino_backend_config(repository: Path) -> None:
    """What Triton's openvino backend gets: parsed as ModelConfig, named by backend, the
    IR and its weights in the version dir."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    for name, precision in (("tiny_openvino", "fp32"), ("tiny_openvino_int8", "int8")):
        config = text_format.Parse((repository / name / "config.pbtxt").read_text(), pb.ModelConfig())
        assert config.backend == "openvino" and not config.platform
        assert config.parameters["PERFORMANCE_HINT"].string_value == "LATENCY"
        assert config.parameters["deploy_precision"].string_value == precision
        assert config.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
        assert [i.name for i in config.input] == ["image"] and config.max_batch_size == 16
        assert {p.name for p in (repository / name / "1").iterdir()} == {"model.xml", "model.bin"}
    ir = repository / "tiny_openvino_int8" / "1" / "model.xml"
    import openvino as ov

    ops = {op.get_type_name() for op in ov.Core().read_model(str(ir)).get_ordered_ops()}
    assert "FakeQuantize" in ops  # the INT8 IR is served there, not the FP32 one
    x = np.zeros((1, 1, 8, 8), np.float32)
    assert ov.Core().compile_model(str(ir), "CPU")(x)[0].shape == (1, 10)
