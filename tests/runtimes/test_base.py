"""Every in-process runner has the Session interface of runtimes/base.py: `outputs` names,
`infer(feeds)` keyed by those names in their order, and `timed(feeds)` a zero-argument
call over the inputs it was given. Checked on one tiny model in each runner."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.runtimes.base import Device, Session
from deploy.runtimes.onnxrt import OnnxRuntime
from deploy.runtimes.timing import Timed
from deploy.runtimes.torchrt import TorchModule
from tests.helpers import export_two_heads, two_heads_net

FEEDS = {"a": np.ones((2, 4), np.float32), "b": np.full((2, 4), 0.5, np.float32)}


def eager(tmp_path: Path, outputs: list[str]) -> Session:
    return TorchModule(two_heads_net(), ["a", "b"], outputs)


def torchscript(tmp_path: Path, outputs: list[str]) -> Session:
    traced = torch.jit.trace(two_heads_net(), (torch.zeros(1, 4), torch.zeros(1, 4)))
    traced.save(str(tmp_path / "m.pt"))
    return TorchModule.torchscript(tmp_path / "m.pt", ["a", "b"], outputs)


def onnxruntime(tmp_path: Path, outputs: list[str]) -> Session:
    return OnnxRuntime(export_two_heads(two_heads_net(), tmp_path / "m.onnx"), outputs=outputs)


RUNNERS = [eager, torchscript, onnxruntime]


@pytest.mark.parametrize("make", RUNNERS)
def test_infer_answers_under_the_output_names(tmp_path: Path, make: Callable[..., Session]) -> None:
    runtime = make(tmp_path, ["mix", "gate"])
    assert runtime.outputs == ("mix", "gate")
    got = runtime.infer(FEEDS)
    assert list(got) == ["mix", "gate"]
    assert all(
        isinstance(v, np.ndarray) and v.shape == (2, 3) and v.dtype == np.float32 for v in got.values()
    )
    assert ((got["gate"] > 0) & (got["gate"] < 1)).all()  # the sigmoid head is the one named gate


@pytest.mark.parametrize("make", RUNNERS)
def test_timed_is_a_zero_argument_call_over_its_inputs(tmp_path: Path, make: Callable[..., Session]) -> None:
    runtime = make(tmp_path, ["mix", "gate"])
    feeds = dict(FEEDS)
    timed = runtime.timed(feeds)
    assert isinstance(timed, Timed)
    feeds["a"] = np.zeros((5, 4), np.float32)  # the call keeps the inputs it was given
    first, again = timed.call(), timed.call()
    want = runtime.infer(FEEDS)["mix"]
    for result in (first, again):
        np.testing.assert_allclose(np.asarray(result[0]), want, rtol=1e-6)


def test_devices_are_named_as_in_the_config() -> None:
    assert [d.value for d in Device] == ["cpu", "cuda"]
    assert Device("cuda") is Device.CUDA and Device.CPU == "cpu"
