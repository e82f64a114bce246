"""deploy.optimize deploys the very model it was given: a fine-tuned torchvision model
whose head was replaced and squeezenet1_1 (each of whose classes builds, without
arguments, *another* model) travel by value; so does a class defined in an unguarded
script or a notebook cell (a real kernel). The check is the eager reference golden
computed in its own process against the live module's answer on the same inputs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

import deploy
from deploy.gates import references
from deploy.live_model import write_config
from deploy.pipeline.errors import ConfigError
from tests.helpers import ROOT, in_kernel


def deployed_matches_live(model: nn.Module, config: Path) -> None:
    """golden's references (the model as the stages rebuilt it) == the live model's."""
    result = deploy.load(config).run(to="golden")
    golden = references.load(Path(result.stages["golden"].outputs["golden"].path))
    for case in golden.values():
        with torch.no_grad():
            (name, want), *_ = case.outputs.items()
            got = model.eval()(*(torch.from_numpy(v) for v in case.inputs.values()))
        np.testing.assert_allclose(want, got.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


def fine_tuned_mobilenet() -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2()
    model.classifier[1] = nn.Linear(1280, 10)  # the usual fine-tuning pattern
    return model.eval()


def squeezenet() -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.squeezenet1_1(num_classes=10).eval()


@pytest.mark.parametrize(
    "make", [fine_tuned_mobilenet, squeezenet], ids=["mobilenet_v2-new-head", "squeezenet1_1"]
)
def test_a_class_that_builds_another_model_is_not_rebuilt(make, tmp_path: Path) -> None:
    model = make()
    config = write_config(model, torch.randn(1, 3, 64, 64), workdir=tmp_path)
    source = yaml.safe_load(config.read_text())["model"]
    assert "factory" not in source and source["file"].endswith("_module.py"), source  # by value
    deployed_matches_live(model, config)


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_a_class_that_rebuilds_equal_is_referenced_by_name(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Plain().eval()
    config = write_config(model, torch.randn(2, 3), workdir=tmp_path)
    assert yaml.safe_load(config.read_text())["model"]["factory"] == f"{__name__}:Plain"
    deployed_matches_live(model, config)


class Adds(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.scale(x) + y


@pytest.mark.parametrize("form", [list, tuple])
def test_two_example_tensors_are_named_as_forward_names_them(tmp_path: Path, form: type) -> None:
    """A list of two was named input0 and input1, which forward(x, y) binds by no name: the
    config was refused, advising a key of a YAML the user never wrote."""
    torch.manual_seed(0)
    model = Adds().eval()
    config = write_config(model, form([torch.randn(2, 3), torch.randn(2, 3)]), workdir=tmp_path)
    assert [i["name"] for i in yaml.safe_load(config.read_text())["inputs"]] == ["x", "y"]
    deployed_matches_live(model, config)


class Unpicklable(Plain):
    def __init__(self, scale: float) -> None:  # needs an argument: not rebuilt by its class
        super().__init__()
        self.lock = threading.Lock()  # and not picklable

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


def test_a_model_that_cannot_travel_says_why_and_that_factory_is_the_way(tmp_path: Path) -> None:
    model = Unpicklable(2.0)
    with pytest.raises(
        ConfigError, match=r"cannot pickle .*Unpicklable by value \(TypeError: .*lock.*factory="
    ):
        write_config(model, torch.randn(2, 3), workdir=tmp_path)
    assert not list(tmp_path.rglob("*.module.pt")), "half-written pickle left behind"


SCRIPT = """\
from pathlib import Path
import numpy as np
import torch
from torch import nn
from deploy.gates import references
from deploy.live_model import write_config
import deploy


class Mine(nn.Module):  # defined in __main__ / a notebook cell: no other process can import it
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, 4)

    def forward(self, x):
        return torch.tanh(self.fc(x)) * 3


torch.manual_seed(0)
model = Mine(5).eval()
config = write_config(model, torch.randn(2, 5), name="mine", workdir="work")
result = deploy.load(config).run(to="export")
case = references.load(Path(result.stages["golden"].outputs["golden"].path))["max"]
with torch.no_grad():
    live = model(torch.from_numpy(case.inputs["input0"])).numpy()
(want,) = case.outputs.values()
print("SAME", bool(np.allclose(want, live, atol=1e-6)), result.ok)
"""


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"}, "PYTHONPATH": str(ROOT)}


def test_a_class_from_an_unguarded_script_travels_by_value(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=600
    )
    assert "SAME True True" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


def test_a_class_from_a_notebook_cell_travels_by_value(tmp_path: Path) -> None:
    assert "SAME True True" in in_kernel(SCRIPT, tmp_path, _env())
