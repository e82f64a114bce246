"""ONNX with its weights beside it (external data): forced on the digits CNN, the model
travels as a directory through export, simplify, INT8, FP16, validate and the Triton
repository, and every stage still proves its numbers. The real >2 GB case is slow and
lives in tests/test_large_model.py."""

from __future__ import annotations

import onnx
import pytest

from deploy.modelio.onnx_files import MODEL_FILE, data_files
from tests.helpers import output_path, run, statuses


def external_weights(path) -> int:
    """How many initializers keep their bytes in a file beside `path`."""
    proto = onnx.load(str(path), load_external_data=False)
    return sum(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


@pytest.fixture(scope="module")
def forced(tmp_path_factory, digits_checkpoint):
    import yaml

    from tests.helpers import tiny_dict

    checkpoint, _ = digits_checkpoint
    tmp = tmp_path_factory.mktemp("external")
    data = tiny_dict(tmp)
    holdout = {"kind": "arrays", "path": str(checkpoint.parent / "test.npy"), "count": 100}
    data["model"]["checkpoint"] = str(checkpoint)
    data["stages"] = {
        "export": {"external_data": "always"},
        "simplify": {},
        "quantize": {
            "calibration": {"kind": "arrays", "path": str(checkpoint.parent / "train.npy"), "count": 64},
            "holdout": holdout,
            "gate": {"min_cosine": 0.99, "min_top1_agreement": 0.9},
        },
        "fp16": {"holdout": holdout, "gate": {"min_cosine": 0.999}},
        "validate": {},
        "triton_config": {"formats": ["onnx", "python"], "precisions": ["fp32", "int8", "fp16"]},
    }
    path = tmp / "external.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, run(path)


def test_every_stage_runs_and_keeps_the_weights_beside_the_model(forced):
    path, results = forced
    assert set(statuses(results).values()) == {"ran"}, statuses(results)
    for stage, artifact in [
        ("export", "onnx"),
        ("simplify", "onnx"),
        ("quantize", "onnx_int8"),
        ("fp16", "onnx_fp16"),
    ]:
        model = output_path(path, results, stage, artifact)
        assert model.name == MODEL_FILE and external_weights(model) > 0, (stage, artifact)
        assert all((model.parent / name).is_file() for name in data_files(model)), (stage, data_files(model))
    assert results["simplify"].metrics["parity"]["max"]["logits"]["passed"]


def test_the_triton_models_carry_their_weights_file(forced):
    path, results = forced
    repo = output_path(path, results, "triton_config", "repository")
    for model in ("tiny_onnx", "tiny_onnx_int8", "tiny_onnx_fp16", "tiny_python"):
        version = repo / model / "1"
        names = data_files(version / MODEL_FILE)
        assert names and all((version / n).stat().st_size > 0 for n in names), model


def test_a_small_model_stays_one_file_by_default(write_config):
    path = write_config(replace={"stages": {"export": {}, "simplify": {}}})
    results = run(path)
    model = output_path(path, results, "simplify", "onnx")
    assert external_weights(model) == 0 and sorted(p.name for p in model.parent.iterdir()) == [MODEL_FILE]


def test_the_dynamo_exporter_writes_external_data_when_asked(write_config):
    path = write_config(
        replace={"stages": {"export": {"exporter": "dynamo", "opset": 18, "external_data": "always"}}}
    )
    results = run(path)
    model = output_path(path, results, "export", "onnx")
    assert external_weights(model) > 0 and data_files(model) == [MODEL_FILE + ".data"]
    assert results["export"].metrics["parity"]["max"]["logits"]["passed"]
