"""Static INT8 on a graph holding -inf (an attention-mask fill, as in every transformer):
the calibration ranges are infinite, and the stage must say which tensors and what to do
instead of writing NaN zero-points (minmax) or leaking numpy's ValueError (entropy,
percentile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ExitCode, StageError
from tests.helpers import run

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


def attention_config(write_config, tmp_path: Path, method: str) -> Path:
    (tmp_path / "attention.py").write_text(ATTENTION)
    inputs = [
        {"name": "x", "dims": ["batch", 6, 8], "min": [1, 6, 8], "opt": [2, 6, 8], "max": [4, 6, 8]},
        {"name": "mask", "dtype": "int64", "dims": ["batch", 6], "min": [1, 6], "opt": [2, 6], "max": [4, 6], "value_range": [0, 1]},
    ]
    stages = {"trace": {}, "export": {}, "quantize": {"method": method, "calibration": {"kind": "random", "count": 8}, "holdout_count": 4}}
    return write_config(
        override={"model": {"file": str(tmp_path / "attention.py"), "callable": "attention"}},
        replace={"inputs": inputs, "outputs": [{"name": "y"}], "stages": stages},
    )


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_infinite_calibration_ranges_name_the_tensors_and_the_way_out(write_config, tmp_path: Path, method: str) -> None:
    path = attention_config(write_config, tmp_path, method)
    with pytest.raises(StageError) as info:
        run(path)
    message = str(info.value)
    assert info.value.stage == "quantize" and info.value.exit_code == ExitCode.STAGE
    assert "calibration ranges are not finite" in message
    assert "-inf" in message  # the range itself is shown with the tensor's name
    assert "exclude" in message and "recipe" in message
    assert "ValueError" not in message and "nan" not in message.lower().replace("finite", "")
