"""PyTorch modules as a runtime: numpy in, named numpy out, eager or TorchScript; nested
results flattened in order; what the model gets wrong (a raising forward, a result that is
not tensors, a count that differs from the config) is a StageFailed naming it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.pipeline.errors import StageFailed
from deploy.runtimes.base import Device
from deploy.runtimes.onnxrt import OnnxRuntime
from deploy.runtimes.torchrt import TorchModule, flatten
from tests.helpers import export_two_heads, two_heads_net

RNG = np.random.default_rng(0)
FEEDS = {"a": RNG.normal(size=(3, 4)).astype(np.float32), "b": RNG.normal(size=(3, 4)).astype(np.float32)}


def direct(net: torch.nn.Module) -> tuple[np.ndarray, ...]:
    with torch.no_grad():
        return tuple(t.numpy() for t in net(torch.from_numpy(FEEDS["a"]), torch.from_numpy(FEEDS["b"])))


def test_eager_outputs_are_the_modules_under_the_declared_names() -> None:
    net = two_heads_net()
    got = TorchModule(net, ["a", "b"], ["mix", "gate"]).infer(FEEDS)
    mix, gate = direct(net)
    assert list(got) == ["mix", "gate"]
    np.testing.assert_array_equal(got["mix"], mix)
    np.testing.assert_array_equal(got["gate"], gate)


def test_inputs_are_passed_in_the_declared_order() -> None:
    net = two_heads_net()
    swapped = TorchModule(net, ["b", "a"], ["mix", "gate"]).infer(FEEDS)
    with torch.no_grad():
        want = net(torch.from_numpy(FEEDS["b"]), torch.from_numpy(FEEDS["a"]))[0].numpy()
    np.testing.assert_array_equal(swapped["mix"], want)
    assert not np.allclose(swapped["mix"], direct(net)[0])


def test_torchscript_and_onnxruntime_answer_what_eager_answers(tmp_path: Path) -> None:
    net = two_heads_net()
    traced = torch.jit.trace(net, (torch.zeros(2, 4), torch.zeros(2, 4)))
    traced.save(str(tmp_path / "m.pt"))
    eager = TorchModule(net, ["a", "b"], ["mix", "gate"]).infer(FEEDS)
    script = TorchModule.torchscript(tmp_path / "m.pt", ["a", "b"], ["mix", "gate"]).infer(FEEDS)
    onnx = OnnxRuntime(export_two_heads(net, tmp_path / "m.onnx")).infer(FEEDS)
    for name in ("mix", "gate"):
        np.testing.assert_allclose(script[name], eager[name], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(onnx[name], eager[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("content", [b"not a zip archive", None])
def test_a_file_that_is_not_torchscript_is_refused_with_its_path(tmp_path: Path, content) -> None:
    path = tmp_path / "weights.pt"
    if content is None:
        torch.save(two_heads_net().state_dict(), path)  # a checkpoint, not a TorchScript archive
    else:
        path.write_bytes(content)
    with pytest.raises(StageFailed, match=f"TorchScript cannot load {path}"):
        TorchModule.torchscript(path, ["a", "b"], ["mix", "gate"])


class Nested(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        return {"first": x + 1, "rest": (x * 2, [x * 3, {"deep": x * 4}])}


def test_nested_results_flatten_in_order() -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    got = TorchModule(Nested(), ["x"], ["p", "q", "r", "s"]).infer({"x": x})
    assert list(got) == ["p", "q", "r", "s"]
    for factor, name in enumerate(("q", "r", "s"), start=2):
        np.testing.assert_array_equal(got[name], x * factor)
    np.testing.assert_array_equal(got["p"], x + 1)


def test_an_output_count_the_config_does_not_declare_is_named() -> None:
    with pytest.raises(StageFailed, match=r"returns 4 output\(s\) but the config declares 2: \['p', 'q'\]"):
        TorchModule(Nested(), ["x"], ["p", "q"]).infer({"x": np.zeros((1, 4), np.float32)})


class Raises(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        raise ValueError("shape mismatch in block 3\nsecond line")


class ReturnsText(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        return "done"


def test_what_the_model_gets_wrong_is_a_stage_failure() -> None:
    x = {"x": np.zeros((1, 4), np.float32)}
    with pytest.raises(
        StageFailed, match=r"^the model's forward raised: ValueError: shape mismatch in block 3$"
    ):
        TorchModule(Raises(), ["x"], ["y"]).infer(x)
    with pytest.raises(StageFailed, match="the model returned a str; outputs must be tensors"):
        TorchModule(ReturnsText(), ["x"], ["y"]).infer(x)
    with pytest.raises(StageFailed, match="returned a NoneType"):
        flatten((torch.zeros(1), None))


def test_the_timed_call_runs_the_module_over_the_inputs_given() -> None:
    net = two_heads_net()
    runtime = TorchModule(net, ["a", "b"], ["mix", "gate"])
    timed = runtime.timed(FEEDS)
    result = timed.call()
    assert timed.phases is None  # CPU: no H2D / compute / D2H split
    np.testing.assert_array_equal(result[0].numpy(), runtime.infer(FEEDS)["mix"])
    assert result[0].is_inference()  # run under torch.inference_mode: no autograd bookkeeping timed


def test_threads_set_torchs_intra_op_threads() -> None:
    before = torch.get_num_threads()
    try:
        TorchModule(two_heads_net(), ["a", "b"], ["mix", "gate"], threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_a_stage_failure() -> None:
    with pytest.raises(StageFailed, match="device: cuda, but torch sees no CUDA GPU"):
        TorchModule(two_heads_net(), ["a", "b"], ["mix", "gate"], device=Device.CUDA)


@pytest.mark.gpu
def test_on_cuda_the_timed_call_records_h2d_compute_and_d2h() -> None:
    net = two_heads_net()
    cpu = TorchModule(two_heads_net(), ["a", "b"], ["mix", "gate"]).infer(FEEDS)
    gpu = TorchModule(net, ["a", "b"], ["mix", "gate"], device=Device.CUDA)
    for name, value in gpu.infer(FEEDS).items():
        np.testing.assert_allclose(value, cpu[name], rtol=1e-3, atol=1e-4)
    timed = gpu.timed(FEEDS)
    for _ in range(3):
        timed.call()
    assert timed.phases is not None and len(timed.phases) == 3
    assert all(len(p) == 3 and min(p) >= 0 for p in timed.phases)
