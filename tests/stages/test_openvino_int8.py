"""openvino_int8 (NNCF) on the CNN trained on scikit-learn's digits: the INT8 IR answers
real held-out digits within the same gate as ONNX Runtime's INT8, a broken calibration is
caught by that gate, the automatic fallback (NNCF's accuracy control) keeps the sensitive
operations in float only when the gate fails, and a typo in `exclude` is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deploy.pipeline.errors import StageError
from tests.helpers import output_path, run


def _config(write_config: Any, checkpoint: Path, int8: dict[str, Any], name: str = "ov.yaml") -> Path:
    stages = {"export": {}, "simplify": {}, "openvino": {"bf16": False}, "openvino_int8": int8}
    return write_config(
        replace={"stages": stages}, override={"model": {"checkpoint": str(checkpoint)}}, name=name
    )


def _data(checkpoint: Path, calibration: str = "train.npy") -> dict[str, Any]:
    folder = checkpoint.parent
    return {
        "calibration": {"kind": "arrays", "path": str(folder / calibration), "count": 128},
        "holdout": {"kind": "arrays", "path": str(folder / "test.npy"), "count": 300},
    }


# This CNN's INT8 is closer to FP32 with NNCF's full bias correction (cosine 0.996; 0.990 fast).
FULL = {"fast_bias_correction": False}


def _gate(**extra: Any) -> dict[str, Any]:
    return {"min_cosine": 0.99, "min_top1_agreement": 0.95, "top_k": 3, "min_topk_agreement": 0.99, **extra}


def _answers(ir: Path, images: np.ndarray) -> np.ndarray:
    import openvino as ov

    compiled = ov.Core().compile_model(str(ir), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.concatenate([compiled(images[i : i + 16])[0] for i in range(0, len(images), 16)])


def _fed_by_fake_quantize(ir: Path) -> set[str]:
    import openvino as ov

    return {
        op.get_friendly_name()
        for op in ov.Core().read_model(str(ir)).get_ordered_ops()
        if op.get_type_name() in ("Convolution", "MatMul")
        and any(i.get_source_output().get_node().get_type_name() == "FakeQuantize" for i in op.inputs())
    }


def test_nncf_int8_answers_real_digits_within_the_int8_gate(write_config, digits_checkpoint):
    checkpoint, _ = digits_checkpoint
    path = _config(write_config, checkpoint, {**_data(checkpoint), **FULL, "gate": _gate()})
    results = run(path)
    report = json.loads(output_path(path, results, "openvino_int8", "accuracy_openvino_int8").read_text())
    assert report["holdout_samples"] == 300 and report["outputs"]["logits"]["top1_agreement"] >= 0.95
    assert report["evidence"]["synthetic"] is False and report["quantizer"] == "nncf"
    assert "fallback" not in report  # the plain INT8 model passed: nothing kept in float
    int8_ir = output_path(path, results, "openvino_int8", "openvino_int8")
    fp32_ir = output_path(path, results, "openvino", "openvino")
    assert _fed_by_fake_quantize(int8_ir)  # it is an INT8 model, not the FP32 one copied
    images, labels = np.load(checkpoint.parent / "test.npy"), np.load(checkpoint.parent / "test_labels.npy")
    int8, fp32 = _answers(int8_ir, images), _answers(fp32_ir, images)
    accuracy = {name: float(np.mean(a.argmax(1) == labels)) for name, a in (("int8", int8), ("fp32", fp32))}
    print(f"digits, OpenVINO: {accuracy}, agreement {report['outputs']['logits']}")
    assert accuracy["fp32"] - accuracy["int8"] <= 0.02, accuracy
    assert not np.allclose(int8, fp32, atol=1e-4)  # INT8 arithmetic, not FP32's
    assert (int8.argmax(1) == fp32.argmax(1)).mean() >= 0.95


def test_a_broken_calibration_is_caught_by_the_same_gate(write_config, digits_checkpoint, tmp_path):
    checkpoint, _ = digits_checkpoint
    constant = tmp_path / "constant.npy"
    np.save(constant, np.zeros((128, 1, 8, 8), np.float32))
    data = _data(checkpoint) | {"calibration": {"kind": "arrays", "path": str(constant), "count": 128}}
    path = _config(write_config, checkpoint, {**data, **FULL, "gate": _gate()}, "broken.yaml")
    with pytest.raises(StageError, match=r"OpenVINO INT8 \(NNCF\) accuracy gate failed: logits: "):
        run(path)


def test_the_fallback_keeps_operations_in_float_only_when_the_gate_fails(write_config, digits_checkpoint):
    """A gate the plain INT8 model misses (cosine 0.99995): NNCF's accuracy control keeps
    operations in float until the gate passes, and the result is judged by the gate."""
    checkpoint, _ = digits_checkpoint
    strict = {**_data(checkpoint), "gate": {"min_cosine": 0.99995}, "auto": True, "max_float_nodes": 16}
    path = _config(write_config, checkpoint, strict, "strict.yaml")
    results = run(path)
    report = json.loads(output_path(path, results, "openvino_int8", "accuracy_openvino_int8").read_text())
    kept = report["fallback"]["kept_float"]
    assert kept and report["outputs"]["logits"]["cosine"] >= 0.99995
    int8_ir = output_path(path, results, "openvino_int8", "openvino_int8")
    assert not set(kept) & _fed_by_fake_quantize(int8_ir)  # what it says it kept is kept

    without = _config(write_config, checkpoint, {**strict, "auto": False}, "no-auto.yaml")
    with pytest.raises(StageError, match=r"accuracy gate failed: logits: cosine 0\.\d+ < min_cosine 0.99995"):
        run(without)


def test_an_unknown_name_in_exclude_is_named(write_config, digits_checkpoint):
    checkpoint, _ = digits_checkpoint
    path = _config(write_config, checkpoint, {**_data(checkpoint), "exclude": ["no_such_op"]}, "typo.yaml")
    with pytest.raises(StageError, match=r"stages\.openvino_int8\.exclude: .*no_such_op"):
        run(path)
