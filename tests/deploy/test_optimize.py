"""deploy.optimize on an nn.Module in memory: a torchvision model goes through export,
validate and smoke on a real tritonserver; the YAML it wrote is then fully cached for
`deploy run`; changed weights rebuild; models that can't be referenced are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import deploy
from pipeline.errors import ConfigError
from pipeline.results import Status
from tests.helpers import run_cli


def mobilenet() -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=10).eval()


@pytest.mark.triton
def test_an_in_memory_torchvision_model_is_served_and_its_yaml_is_cached(tmp_path: Path) -> None:
    model = mobilenet()
    options = {
        "name": "mnv3",
        "dynamic": {"image": {0: "batch"}},
        "workdir": tmp_path,
        "factory": "torchvision.models:mobilenet_v3_small",
        "kwargs": {"weights": None, "num_classes": 10},
    }
    result = deploy.optimize(model, {"image": torch.randn(2, 3, 64, 64)}, **options)
    assert result.ok and result.stages["smoke"].status is Status.RAN
    assert "passed" in str(result.stages["smoke"].metrics["headline"])
    written = tmp_path / "mnv3" / "mnv3.yaml"
    plan = run_cli("plan", str(written), "--json")
    assert plan.returncode == 0, plan.stderr
    assert {row["action"] for row in json.loads(plan.stdout)} == {"cached"}
    with torch.no_grad():
        model.features[0][0].weight.mul_(1.5)  # other weights: another model
    again = deploy.optimize(model, {"image": torch.randn(2, 3, 64, 64)}, **options)
    assert again.stages["export"].status is Status.RAN


class NeedsArguments(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_a_class_from_main_or_one_needing_arguments_is_refused(tmp_path: Path) -> None:
    class Local(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    with pytest.raises(ConfigError, match="defined in __main__ or a function: move the class into a module"):
        deploy.optimize(Local(), torch.ones(1, 2), name="m", workdir=tmp_path)
    with pytest.raises(ConfigError, match="pass factory='module:function'"):
        deploy.optimize(NeedsArguments(3), torch.ones(1, 3), name="m", workdir=tmp_path)


def test_dynamic_must_name_example_inputs_and_their_axes(tmp_path: Path) -> None:
    model = NeedsArguments(3)
    options = {
        "name": "m",
        "workdir": tmp_path,
        "factory": f"{__name__}:NeedsArguments",
        "kwargs": {"width": 3},
    }
    with pytest.raises(ConfigError, match=r"no example input named \['x'\]"):
        deploy.optimize(model, torch.ones(1, 3), dynamic={"x": {0: "batch"}}, **options)
    with pytest.raises(ConfigError, match=r"axes \[2\] outside a 2-d input"):
        deploy.optimize(model, {"x": torch.ones(1, 3)}, dynamic={"x": {2: "batch"}}, **options)
