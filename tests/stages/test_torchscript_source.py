"""A TorchScript source whose forward wants more than the declared tensors is a config
error at `deploy validate` (read from the file, without torch), not a failure mid-run."""

from __future__ import annotations

from pathlib import Path

import torch

from deploy.modelio.torchscript_signature import forward_args
from deploy.pipeline.errors import ExitCode
from tests.helpers import run_cli


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return self.lin(x) * scale


class Plain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def config_for(write_config, module_path: Path) -> Path:
    inputs = [{"name": "x", "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [4, 4]}]
    stages = {"trace": {}, "export": {}}
    return write_config(
        replace={"model": {"torchscript": str(module_path)}, "inputs": inputs, "stages": stages}
    )


def test_a_non_tensor_forward_argument_is_a_config_error(write_config, tmp_path: Path) -> None:
    torch.jit.save(torch.jit.script(Scaled()), str(tmp_path / "scaled.pt"))
    proc = run_cli("validate", str(config_for(write_config, tmp_path / "scaled.pt")))
    console = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.CONFIG, console
    assert "model.torchscript: forward argument 'scale' is float, not a Tensor" in console
    assert "forward takes 2 argument(s) (x, scale), the config declares 1 input(s)" in console
    assert "Traceback" not in console


def test_a_tensor_only_forward_validates(write_config, tmp_path: Path) -> None:
    torch.jit.save(torch.jit.trace(Plain(), (torch.randn(2, 4),)), str(tmp_path / "plain.pt"))
    assert forward_args(tmp_path / "plain.pt") == [("x", "Tensor")]
    proc = run_cli("validate", str(config_for(write_config, tmp_path / "plain.pt")))
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr


def test_a_file_that_is_not_torchscript_is_left_to_the_trace_stage(tmp_path: Path) -> None:
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    assert forward_args(tmp_path / "junk.pt") is None


class Keyed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.lin(x)
        return {"logits": y, "score": y.sum(1)}


def test_a_scripted_model_returning_a_dict_is_refused_naming_the_cause(write_config, tmp_path: Path) -> None:
    """Both exporters failed with their own words ("SpecViolationError ...", "not part of
    the active trace"), neither of which names the dict or the way out."""
    torch.jit.save(torch.jit.script(Keyed()), str(tmp_path / "keyed.pt"))
    inputs = [{"name": "x", "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [4, 4]}]
    config = write_config(
        replace={
            "model": {"torchscript": str(tmp_path / "keyed.pt")},
            "inputs": inputs,
            "outputs": [{"name": "logits"}, {"name": "score"}],
            "stages": {"export": {}},
        }
    )
    proc = run_cli("run", str(config), "--to", "export")
    console = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.STAGE, console
    assert "model.torchscript: its outputs are found by key or path (logits, score)" in console
    assert "returns the declared outputs as a tuple, or give the model as Python" in console
