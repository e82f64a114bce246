"""FP16 on the digits CNN with real trained weights: inside the gate on real inputs, and
a damaging conversion is caught."""

from __future__ import annotations

import json

import onnx
import pytest

from deploy.pipeline.errors import StageError
from tests.helpers import output_path, run


def fp16_config(write_config, checkpoint, holdout, name="fp16.yaml"):
    stages = {
        "trace": {},
        "export": {},
        "fp16": {"holdout": holdout, "gate": {"min_cosine": 0.999, "min_top1_agreement": 0.99}},
    }
    return write_config(
        replace={"stages": stages}, override={"model": {"checkpoint": str(checkpoint)}}, name=name
    )


def test_fp16_inside_the_gate_with_fp32_io(write_config, digits_checkpoint):
    checkpoint, _ = digits_checkpoint
    path = fp16_config(
        write_config,
        checkpoint,
        {"kind": "arrays", "path": str(checkpoint.parent / "test.npy"), "count": 200},
    )
    results = run(path)
    report = json.loads(output_path(path, results, "fp16", "accuracy_fp16").read_text())
    assert report["outputs"]["logits"]["top1_agreement"] >= 0.99
    model = onnx.load(str(output_path(path, results, "fp16", "onnx_fp16")))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # I/O kept FP32
    weights = [i for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16]
    assert weights, "no FP16 weights: nothing was converted"
    # Timed on this CPU, FP16's speed is said to be a CPU timing, never the GPU precision's verdict.
    assert (report["speed"]["device"], report["speed"]["target"]) == ("cpu", "cuda")
    headline = results["fp16"].metrics["headline"]
    said = (
        "FP32 speed on the CPU",
        "SLOWER than FP32 on the CPU",
        "unsettled on the CPU",
        "not judged, CONTENDED",
    )
    assert any(s in headline for s in said), headline
    assert "a CPU timing of a GPU precision, not its verdict: bench on cuda is" in headline, headline


def test_a_damaging_conversion_is_caught(write_config, digits_checkpoint):
    """Clamping every weight to FP16's "finite" range of ±0.05 breaks the model: the gate
    must say so (ONNX Runtime on CPU computes FP16 convolutions in FP32, so activation
    overflow can't be provoked here; clamped weights are a real conversion fault)."""
    checkpoint, _ = digits_checkpoint
    path = fp16_config(
        write_config,
        checkpoint,
        {"kind": "arrays", "path": str(checkpoint.parent / "test.npy"), "count": 100},
    )
    import yaml

    data = yaml.safe_load(path.read_text())
    data["stages"]["fp16"]["max_finite"] = 0.05
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(StageError, match=r"FP16 accuracy gate failed: logits: (cosine|top1)"):
        run(path)
