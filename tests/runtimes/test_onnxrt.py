"""ONNX Runtime and PyTorch runners on one tiny real model: the same outputs for the same
inputs, an unknown output named, and a timed call that runs the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.pipeline.errors import StageFailed
from deploy.runtimes.onnxrt import OnnxRuntime


@pytest.fixture
def model(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).eval()
    path = tmp_path / "m.onnx"
    torch.onnx.export(
        net,
        (torch.zeros(2, 6),),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "b"}, "y": {0: "b"}},
        dynamo=False,
    )
    return net, path


def test_onnxruntime_answers_what_torch_answers(model: tuple[torch.nn.Module, Path]) -> None:
    net, path = model
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    got = OnnxRuntime(path).infer({"x": x})["y"]
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert OnnxRuntime(path).input_types() == {"x": (["b", 6], "float32")}


def test_an_output_the_model_lacks_is_named(model: tuple[torch.nn.Module, Path]) -> None:
    with pytest.raises(StageFailed, match=r"no output\(s\) \['z'\]"):
        OnnxRuntime(model[1], outputs=["z"])


def test_the_timed_call_runs_the_model(model: tuple[torch.nn.Module, Path]) -> None:
    timed = OnnxRuntime(model[1]).timed({"x": np.ones((2, 6), np.float32)})
    result = timed.call()
    assert np.asarray(result[0]).shape == (2, 3) and timed.phases is None
