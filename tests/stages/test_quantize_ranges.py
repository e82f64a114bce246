"""Static INT8 on a graph holding -inf (an attention-mask fill, as in every transformer):
the calibration ranges are infinite, and the stage must say which tensors and what to do
instead of writing NaN zero-points (minmax) or leaking numpy's ValueError (entropy,
percentile)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from deploy.pipeline.errors import ExitCode, StageError
from tests.helpers import output_path, run

ATTENTION = '''
import torch


class MaskedAttention(torch.nn.Module):
    """One attention head whose padded keys get -inf before the softmax."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.q, self.k = torch.nn.Linear(width, width), torch.nn.Linear(width, width)
        self.scale = width ** -0.5

    def forward(self, x, mask):
        scores = self.q(x) @ self.k(x).transpose(1, 2) * self.scale
        # The first key always stays visible, so no row is all -inf (that would be NaN).
        keep = (mask != 0) | (torch.arange(mask.shape[1]) == 0)
        scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
        return (torch.softmax(scores, -1) @ x).flatten(1)


def attention(width: int = 8):
    return MaskedAttention(width)
'''


def attention_config(write_config, tmp_path: Path, method: str, **quantize: object) -> Path:
    (tmp_path / "attention.py").write_text(ATTENTION)
    inputs = [
        {"name": "x", "dims": ["batch", 6, 8], "min": [1, 6, 8], "opt": [2, 6, 8], "max": [4, 6, 8]},
        {
            "name": "mask",
            "dtype": "int64",
            "dims": ["batch", 6],
            "min": [1, 6],
            "opt": [2, 6],
            "max": [4, 6],
            "value_range": [0, 1],
        },
    ]
    stages = {
        "trace": {},
        "export": {"exporter": "torchscript"},  # the tensor names asserted are the legacy exporter's
        "quantize": {
            "method": method,
            "calibration": {"kind": "random", "count": 8},
            "holdout_count": 4,
            **quantize,
        },
    }
    return write_config(
        override={"model": {"file": str(tmp_path / "attention.py"), "callable": "attention"}},
        replace={"inputs": inputs, "outputs": [{"name": "y"}], "stages": stages},
    )


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_infinite_calibration_ranges_name_the_tensors_and_the_way_out(
    write_config, tmp_path: Path, method: str
) -> None:
    path = attention_config(write_config, tmp_path, method)
    with pytest.raises(StageError) as info:
        run(path)
    message = str(info.value)
    assert info.value.stage == "quantize" and info.value.exit_code == ExitCode.STAGE
    assert "calibration ranges are not finite" in message
    # The masked_fill exports as a Where node: its output, its range and the node are named.
    assert "_output_0 [-inf, " in message and "from Where node " in message
    assert "exclude" in message and "recipe" in message and "fp16 stage" in message
    assert "ValueError" not in message and "nan" not in message.lower().replace("finite", "")


def test_other_calibration_errors_are_not_replaced_by_minmax_ranges(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The minmax retry is only there to name infinite tensors: when its ranges are finite,
    entropy's own error stands (a minmax cache would fail quantize_static's method check)."""
    import numpy as np
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    from deploy.stages.quantize import calibration

    def ranges(
        model: Path, calibration: list, method: str, work: Path, scope: object, step=None
    ) -> TensorsData:
        if method != "minmax":
            raise ValueError("entropy's own problem")
        return TensorsData(
            CalibrationMethod.MinMax, {"t": TensorData(lowest=np.float32(0), highest=np.float32(1))}
        )

    monkeypatch.setattr(calibration, "_ranges", ranges)
    with pytest.raises(ValueError, match="entropy's own problem"):
        calibration.calibrate(tmp_path / "model.onnx", [], "entropy", tmp_path, calibration.Scope(None, ()))
    assert not (tmp_path / "calibration.json").exists()


@pytest.mark.parametrize(
    "recipe",
    [
        {"recipe": "dynamic"},  # no calibrated ranges at all
        {"op_types": ["MatMul"]},  # static, but the -inf tensor feeds no MatMul
    ],
    ids=["dynamic", "static-matmul-only"],
)
def test_recipes_that_avoid_the_infinite_range_quantize_the_masked_model(
    write_config, tmp_path: Path, recipe: dict
) -> None:
    # Random weights: the gate is opened (min_cosine -1); what is tested is that the recipe
    # quantizes this graph at all, with finite outputs.
    path = attention_config(write_config, tmp_path, "minmax", gate={"min_cosine": -1.0}, **recipe)
    results = run(path)
    report = json.loads(output_path(path, results, "quantize", "accuracy_int8").read_text())
    ops = {n.op_type for n in onnx.load(output_path(path, results, "quantize", "onnx_int8")).graph.node}
    expected = {"MatMulInteger", "DynamicQuantizeLinear"} if "recipe" in recipe else {"QuantizeLinear"}
    assert expected <= ops, ops
    assert report["recipe"] == recipe.get("recipe", "static")
    assert all(m["cosine"] is not None and m["max_abs"] < float("inf") for m in report["outputs"].values())
