"""The automatic FP32 fallback, on the digits CNN with real trained weights and one layer
built so that it cannot be converted: without `auto` the gate fails; with it, the stage
finds that layer, keeps it (and only what it must) in FP32, and passes."""

from __future__ import annotations

import json

import pytest

from deploy.pipeline.errors import StageError
from tests.helpers import output_path, run

# TinyCNN's trained layers with a pair of Linear layers between features and head that
# are the identity in exact arithmetic. mode "range": `lift` adds a constant 1e4 channel
# that `drop` ignores, so one per-tensor INT8 range must cover 0..1e4 and the real
# features (0..5) all round to one step; only quantizing `drop`'s input hurts. mode
# "scale": `lift` scales half the features by 1e8 and `drop` scales them back by 1e-8,
# exact enough in FP32, but in FP16 1e8 is clipped to 65504 and 1e-8 underflows to 0.
SENSITIVE = """
import sys
import torch
from torch import nn

sys.path.insert(0, {models!r})
from tiny_cnn import tiny_cnn


class Sensitive(nn.Module):
    def __init__(self, checkpoint: str, mode: str) -> None:
        super().__init__()
        trained = tiny_cnn(width=8)
        trained.load_state_dict(torch.load(checkpoint))
        self.features, self.head = trained.features, trained.head
        extra = 1 if mode == "range" else 0
        self.lift, self.drop = nn.Linear(16, 16 + extra), nn.Linear(16 + extra, 16)
        with torch.no_grad():
            self.lift.weight.copy_(torch.eye(16 + extra, 16))
            self.drop.weight.copy_(torch.eye(16, 16 + extra))
            self.lift.bias.fill_(0.0)
            self.drop.bias.fill_(0.0)
            if mode == "range":
                self.lift.bias[16] = 1e4
            else:
                self.lift.weight[::2] *= 1e8
                self.drop.weight[:, ::2] *= 1e-8

    def forward(self, x):
        return self.head(self.drop(self.lift(torch.flatten(self.features(x), 1))))


def sensitive(checkpoint: str, mode: str):
    return Sensitive(checkpoint, mode).eval()
"""

GATE = {"min_cosine": 0.99, "min_top1_agreement": 0.95}


def sensitive_config(write_config, tmp_path, digits_checkpoint, mode: str, stage: str, params: dict):
    from tests.helpers import ROOT

    checkpoint, _ = digits_checkpoint
    source = tmp_path / "sensitive.py"
    source.write_text(SENSITIVE.format(models=str(ROOT / "configs" / "models")))
    model = {
        "file": str(source),
        "callable": "sensitive",
        "kwargs": {"checkpoint": str(checkpoint), "mode": mode},
    }
    # The legacy exporter's node names (`/drop/...`) are what these tests name nodes by.
    stages = {"trace": {}, "export": {"exporter": "torchscript"}, "simplify": {}, stage: params}
    return write_config(replace={"stages": stages, "model": model}, name=f"{stage}.yaml")


def int8(digits_checkpoint, auto: bool) -> dict:
    data = digits_checkpoint[0].parent
    return {
        "calibration": {"kind": "arrays", "path": str(data / "train.npy"), "count": 128},
        "holdout": {"kind": "arrays", "path": str(data / "test.npy"), "count": 300},
        "gate": GATE,
        "auto": auto,
    }


def test_int8_fails_the_gate_without_fallback(write_config, tmp_path, digits_checkpoint) -> None:
    path = sensitive_config(
        write_config, tmp_path, digits_checkpoint, "range", "quantize", int8(digits_checkpoint, False)
    )
    with pytest.raises(StageError, match=r"INT8 accuracy gate failed"):
        run(path)


def test_int8_fallback_keeps_only_the_layer_that_cannot_be_quantized(
    write_config, tmp_path, digits_checkpoint
) -> None:
    path = sensitive_config(
        write_config, tmp_path, digits_checkpoint, "range", "quantize", int8(digits_checkpoint, True)
    )
    results = run(path)
    report = json.loads(output_path(path, results, "quantize", "accuracy_int8").read_text())
    fallback = report["fallback"]
    first = fallback["ranking"][0]
    # The most sensitive node is `drop`, whose input carries the 0..1e4 range; its input's
    # Q/DQ pair goes only when its producer `lift` is kept in float too. Nothing else is.
    assert first["node"].startswith("/drop/") and first["partners"] == ["/lift/Gemm"], fallback["ranking"][:3]
    assert fallback["kept_float"] == [first["node"], "/lift/Gemm"]
    assert [a["passed"] for a in fallback["attempts"]] == [False, True]
    assert report["outputs"]["logits"]["top1_agreement"] >= 0.95
    assert "(2 nodes kept FP32)" in results["quantize"].metrics["headline"]


def test_fp16_fallback_keeps_the_scaling_layers_in_fp32(write_config, tmp_path, digits_checkpoint) -> None:
    data = digits_checkpoint[0].parent
    params = {
        "holdout": {"kind": "arrays", "path": str(data / "test.npy"), "count": 300},
        "calibration": {"kind": "arrays", "path": str(data / "train.npy"), "count": 32},
        "gate": GATE,
    }
    path = sensitive_config(write_config, tmp_path, digits_checkpoint, "scale", "fp16", params)
    with pytest.raises(StageError, match=r"FP16 accuracy gate failed"):
        run(path)
    path = sensitive_config(
        write_config, tmp_path, digits_checkpoint, "scale", "fp16", params | {"auto": True}
    )
    results = run(path)
    report = json.loads(output_path(path, results, "fp16", "accuracy_fp16").read_text())
    fallback = report["fallback"]
    # `lift` overflows FP16 (65504 x features > 65504) and ranks first; kept in FP32, its
    # result would overflow again where `drop` reads it in FP16, so `drop` goes with it.
    first = fallback["ranking"][0]
    assert first["node"] == "/lift/Gemm" and first["partners"] == ["/drop/Gemm"], fallback["ranking"][:3]
    assert fallback["kept_float"] == ["/lift/Gemm", "/drop/Gemm"], fallback
    assert report["outputs"]["logits"]["top1_agreement"] >= 0.95
