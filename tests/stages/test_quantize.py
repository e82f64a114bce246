"""INT8 on a CNN with real trained weights (scikit-learn digits): the gate passes a good
calibration, catches a broken one, and the Q/DQ settings follow the target."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from deploy.pipeline.errors import ConfigError, StageError
from deploy.pipeline.graph.project import load_project
from tests.helpers import output_path, run


def digits_config(write_config, checkpoint, quantize, name="q.yaml"):
    stages = {"trace": {}, "export": {}, "simplify": {}, "quantize": quantize}
    return write_config(
        replace={"stages": stages}, override={"model": {"checkpoint": str(checkpoint)}}, name=name
    )


def accuracy_of(model_path, images, labels) -> float:
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"image": images})[0]
    return float(np.mean(logits.argmax(1) == labels))


def gate(**extra):
    return {"min_cosine": 0.99, "min_top1_agreement": 0.95, "top_k": 3, "min_topk_agreement": 0.99, **extra}


def test_int8_stays_inside_the_gate_on_real_data(write_config, digits_checkpoint):
    checkpoint, fp32_accuracy = digits_checkpoint
    data = checkpoint.parent
    path = digits_config(
        write_config,
        checkpoint,
        {
            "calibration": {"kind": "arrays", "path": str(data / "train.npy"), "count": 128},
            "holdout": {"kind": "arrays", "path": str(data / "test.npy"), "count": 300},
            "gate": gate(),
        },
    )
    results = run(path)
    report = json.loads(output_path(path, results, "quantize", "accuracy_int8").read_text())
    assert report["outputs"]["logits"]["top1_agreement"] >= 0.95 and report["holdout_samples"] == 300
    images, labels = np.load(data / "test.npy"), np.load(data / "test_labels.npy")
    int8 = accuracy_of(output_path(path, results, "quantize", "onnx_int8"), images, labels)
    fp32 = accuracy_of(output_path(path, results, "simplify", "onnx"), images, labels)
    print(f"digits: FP32 accuracy {fp32:.4f}, INT8 {int8:.4f}, agreement {report['outputs']['logits']}")
    assert fp32 == pytest.approx(fp32_accuracy, abs=0.01)
    assert fp32 - int8 <= 0.02, (fp32, int8)  # the label-accuracy drop the gate allows here
    # Real data is named as such, and nothing calls it random.
    assert report["evidence"]["synthetic"] is False and "arrays from" in report["evidence"]["source"]
    assert "RANDOM" not in results["quantize"].metrics["headline"]


def test_accuracy_on_random_inputs_says_so_everywhere(write_config, digits_checkpoint):
    """The same trained CNN gated on random held-out inputs: the gate may pass, but the
    console line, the summary, the report table and select's status table all say the
    data was random and which key takes real data."""
    checkpoint, _ = digits_checkpoint
    stages = {
        "export": {},
        "quantize": {"calibration": {"count": 8}, "holdout_count": 8, "gate": {"min_cosine": 0.9}},
        "bench": {
            "warmup_ms": 10,
            "duration_s": 0.05,
            "iterations": 5,
            "batches": [1],
            "runtimes": ["onnxruntime", "onnxruntime_int8"],
        },
        "select": {"min_gain": 0},
    }
    path = write_config(
        replace={"stages": stages}, override={"model": {"checkpoint": str(checkpoint)}}, name="r.yaml"
    )
    results = run(path)
    quantize = results["quantize"].metrics
    key = "stages.quantize.calibration (kind: images, arrays or text)"
    assert "INT8 vs FP32 on RANDOM held-out inputs" in quantize["headline"] and key in quantize["headline"]
    assert quantize["accuracy"]["evidence"]["synthetic"] is True
    table = next(t for t in quantize["report"] if t["title"].startswith("INT8 vs FP32 on 8 RANDOM held-out"))
    assert key in table["note"]
    status = next(
        t for t in results["select"].metrics["report"] if t["title"] == "Status per format and precision"
    )
    int8 = next(r for r in status["rows"] if "onnxruntime_int8" in r[0])
    assert int8[2].endswith(f"(random data; real data goes in {key})")


def test_broken_calibration_is_caught_by_the_gate(write_config, digits_checkpoint, tmp_path):
    checkpoint, _ = digits_checkpoint
    constant = tmp_path / "constant.npy"
    np.save(constant, np.zeros((64, 1, 8, 8), np.float32))
    path = digits_config(
        write_config,
        checkpoint,
        {
            "calibration": {"kind": "arrays", "path": str(constant), "count": 64},
            "holdout": {"kind": "arrays", "path": str(checkpoint.parent / "test.npy"), "count": 300},
            "gate": gate(),
        },
    )
    with pytest.raises(
        StageError, match=r"INT8 accuracy gate failed: logits: (cosine|top1_agreement) [0-9.]+ <"
    ):
        run(path)


def zero_points(model_path) -> list[np.ndarray]:
    model = onnx.load(str(model_path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return [inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2]


@pytest.mark.parametrize(("target", "dtype"), [("onnxruntime", np.uint8), ("tensorrt", np.int8)])
def test_qdq_settings_follow_the_target(write_config, digits_checkpoint, target, dtype):
    checkpoint, _ = digits_checkpoint
    path = digits_config(
        write_config,
        checkpoint,
        {
            "target": target,
            "calibration": {"kind": "arrays", "path": str(checkpoint.parent / "train.npy"), "count": 32},
            # Symmetric int8 activations waste half their range after ReLU: looser here.
            "gate": {"min_cosine": 0.9},
        },
        name=f"{target}.yaml",
    )
    model = output_path(path, run(path), "quantize", "onnx_int8")
    points = zero_points(model)
    assert points and all(p.dtype == dtype for p in points)
    if target == "tensorrt":
        assert all(np.all(p == 0) for p in points)  # symmetric activations, as TensorRT expects


def test_calibration_data_change_reruns_quantize(write_config, digits_checkpoint, tmp_path):
    checkpoint, _ = digits_checkpoint
    data = tmp_path / "calib.npy"
    np.save(data, np.load(checkpoint.parent / "train.npy")[:40])
    path = digits_config(
        write_config,
        checkpoint,
        {
            "calibration": {
                "kind": "arrays",
                "path": str(data),
                "count": 16,
            },
            "holdout_count": 16,
            "gate": {"min_cosine": 0.9},
        },
    )
    assert run(path)["quantize"].status.value == "ran"
    assert run(path)["quantize"].status.value == "cached"
    np.save(data, np.load(checkpoint.parent / "train.npy")[40:80])
    rerun = run(path)["quantize"]
    assert rerun.status.value == "ran" and any(r.startswith("env.calibration_data") for r in rerun.reasons)


def test_data_source_errors_name_their_field(write_config):
    path = write_config(override={"stages": {"quantize": {"calibration": {"kind": "arrays"}}}})
    with pytest.raises(ConfigError) as info:
        load_project(path)
    assert any(
        str(i).startswith("stages.quantize.calibration:") and "needs a path" in str(i)
        for i in info.value.issues
    )
    path = write_config(
        override={"stages": {"quantize": {"calibration": {"kind": "images", "path": "/no/such/dir"}}}}
    )
    with pytest.raises(ConfigError) as info:
        load_project(path)
    assert any(str(i).startswith("stages.quantize.calibration.path:") for i in info.value.issues)


def test_image_source_preprocessing(tmp_path):
    from PIL import Image

    from deploy.datasources.datasource import DataSource, load
    from deploy.spec.config import DeployConfig

    for i in range(3):
        Image.new("RGB", (320, 240), (255, 0, 128)).save(tmp_path / f"{i}.png")
    config = DeployConfig.model_validate(
        {
            "name": "m",
            "model": {"factory": "a:b"},
            "outputs": [{"name": "y"}],
            "stages": {"x": {}},
            "inputs": [
                {
                    "name": "x",
                    "dims": ["batch", 3, 224, 224],
                    "min": [1, 3, 224, 224],
                    "opt": [1, 3, 224, 224],
                    "max": [1, 3, 224, 224],
                }
            ],
        }
    )
    samples = load(DataSource(kind="images", path=tmp_path, count=2, offset=1), config)
    assert len(samples) == 2 and samples[0]["x"].shape == (1, 3, 224, 224)
    red = samples[0]["x"][0, 0]
    assert np.allclose(red, (1.0 - 0.485) / 0.229, atol=1e-5)
    with pytest.raises(Exception, match=r"3 samples|2 samples|wanted"):
        load(DataSource(kind="images", path=tmp_path, count=3, offset=1), config)


def test_modelopt_quantizer_is_checked_and_says_how_to_install(write_config, digits_checkpoint):
    checkpoint, _ = digits_checkpoint
    with pytest.raises(ConfigError) as info:
        load_project(
            digits_config(
                write_config, checkpoint, {"quantizer": "modelopt", "method": "percentile"}, name="mo1.yaml"
            )
        )
    text = [str(i) for i in info.value.issues]
    assert any("stages.quantize.quantizer: modelopt writes Q/DQ for TensorRT" in t for t in text)
    assert any("stages.quantize.method:" in t for t in text)
    try:
        import modelopt.onnx.quantization  # noqa: F401

        pytest.skip("ModelOpt is installed here")
    except ImportError:
        pass
    from deploy.pipeline.errors import MissingDependency

    path = digits_config(
        write_config,
        checkpoint,
        {"quantizer": "modelopt", "target": "tensorrt", "calibration": {"count": 4}, "holdout_count": 4},
        name="mo2.yaml",
    )
    with pytest.raises(StageError, match=r"stage 'quantize' failed: .*nvidia-modelopt\[onnx\]") as failed:
        run(path)  # the stage fails, keeping the missing library's exit code
    assert failed.value.exit_code == MissingDependency("x", "y").exit_code
