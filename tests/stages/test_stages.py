"""Each stage on the tiny model: what it writes and what it proves."""

from __future__ import annotations

import json

import onnx
import pytest

from deploy.pipeline.errors import StageError
from tests.helpers import output_path, run, statuses


def test_trace_records_golden_data_at_min_opt_max(write_config):
    from deploy.gates import references

    path = write_config()
    results = run(path, stop="trace")
    cases = references.load(output_path(path, results, "golden", "golden"))
    shapes = {label: case.inputs["image"].shape for label, case in cases.items()}
    assert {k: shapes[k] for k in ("min", "opt", "max", "low", "high")} == {
        "min": (1, 1, 8, 8),
        "opt": (4, 1, 8, 8),
        "max": (16, 1, 8, 8),
        "low": (4, 1, 8, 8),
        "high": (4, 1, 8, 8),
    }
    assert all(1 <= shapes[s][0] <= 16 and shapes[s][1:] == (1, 8, 8) for s in ("sample1", "sample2"))
    assert cases["max"].outputs["logits"].shape == (16, 10)
    assert all(results["trace"].metrics["parity"][c]["logits"]["passed"] for c in cases)


def test_export_keeps_batch_dynamic_and_records_opset(write_config):
    path = write_config()
    results = run(path, stop="export")
    model = onnx.load(str(output_path(path, results, "export", "onnx")))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert results["export"].metrics["opset_written"] == 17


def test_dynamo_exporter_records_the_opset_it_actually_wrote(write_config):
    path = write_config({"stages": {"export": {"exporter": "dynamo", "opset": 18}}})
    results = run(path, stop="export")
    assert results["export"].status.value == "ran"
    assert results["export"].metrics["opset_written"] >= 18
    model = onnx.load(str(output_path(path, results, "export", "onnx")))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # still dynamic


def test_simplify_disabled_passes_the_model_through(write_config):
    path = write_config({"stages": {"simplify": {"enabled": False}}})
    results = run(path, stop="simplify")
    assert results["simplify"].outputs["onnx"].digest == results["export"].outputs["onnx"].digest


def test_validate_passes_trained_model_and_reports_numbers(write_config, digits_checkpoint):
    checkpoint, accuracy = digits_checkpoint
    assert accuracy > 0.9  # the weights are real
    path = write_config({"model": {"checkpoint": str(checkpoint)}})
    results = run(path, stop="validate")
    report = json.loads(output_path(path, results, "validate", "report").read_text())
    for runtime in ("onnxruntime", "torchscript"):
        assert report[runtime]["passed"]
        metrics = report[runtime]["shapes"]["max"]["logits"]
        assert metrics["max_abs"] < 1e-4 and metrics["cosine"] > 0.9999


def test_validate_gate_fails_beyond_threshold(write_config, digits_checkpoint):
    checkpoint, _ = digits_checkpoint
    path = write_config(
        {
            "model": {"checkpoint": str(checkpoint)},
            "stages": {"validate": {"atol": 0.0, "rtol": 0.0, "runtimes": ["onnxruntime"]}},
        }
    )
    with pytest.raises(
        StageError,
        match=r"onnxruntime vs eager parity failed: .*\|diff\| > atol 0 \+ rtol 0\*\|ref\| \(max_abs [0-9.e-]+",
    ):
        run(path)


def test_triton_config_round_trips_and_matches_the_shape_spec(write_config):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    path = write_config(
        {
            "stages": {
                "triton_config": {
                    "max_batch_size": 8,
                    "instance_group": {"kind": "auto", "count": 2},
                    "dynamic_batching": {"preferred_batch_sizes": [4, 8]},
                }
            }
        }
    )
    results = run(path)
    tree = output_path(path, results, "triton_config", "repository")
    onnx_cfg = text_format.Parse(
        (tree / "tiny_onnx" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )
    assert (onnx_cfg.platform, onnx_cfg.max_batch_size) == ("onnxruntime_onnx", 8)
    assert list(onnx_cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert (
        onnx_cfg.instance_group[0].count == 2
        and onnx_cfg.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_AUTO
    )
    ts_cfg = text_format.Parse(
        (tree / "tiny_torchscript" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )
    assert ts_cfg.input[0].name == "image__0" and ts_cfg.output[0].name == "logits__0"
    assert (tree / "tiny_torchscript" / "1" / "model.pt").is_file()


def test_unbatched_model_keeps_full_dims(write_config):
    path = write_config(
        replace={
            "batch_dim": None,
            "inputs": [
                {
                    "name": "image",
                    "dims": [1, 1, 8, 8],
                    "min": [1, 1, 8, 8],
                    "opt": [1, 1, 8, 8],
                    "max": [1, 1, 8, 8],
                }
            ],
            "stages": {
                "trace": {},
                "export": {},
                "triton_config": {"formats": ["onnx"], "dynamic_batching": None},
            },
        }
    )
    results = run(path)
    assert statuses(results)["triton_config"] == "ran"
    text = (
        output_path(path, results, "triton_config", "repository") / "tiny_onnx" / "config.pbtxt"
    ).read_text()
    assert "max_batch_size" not in text and "dims: 10" in text
    assert text.split("output")[0].count("dims: ") == 4  # batch axis kept: 1 x 1 x 8 x 8
