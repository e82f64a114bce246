"""deploy.optimize on an nn.Module in memory: a torchvision model goes through export,
validate and smoke on a real tritonserver; the YAML it wrote is then fully cached for
`deploy run`; changed weights rebuild; a class that needs arguments travels by value."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

import deploy
from deploy.live_model import write_config
from deploy.pipeline.errors import ConfigError
from deploy.pipeline.report.results import Status
from tests.helpers import Cli


def mobilenet() -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=10).eval()


@pytest.mark.matrix  # end to end (deployed, served, timed): `pytest -m matrix`, as .ci/run runs it after the README's command
@pytest.mark.triton
def test_an_in_memory_torchvision_model_is_served_and_its_yaml_is_cached(tmp_path: Path, cli: Cli) -> None:
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
    plan = cli("plan", str(written), "--json")
    assert plan.returncode == 0, plan.stderr
    assert {row["action"] for row in json.loads(plan.stdout)} == {"cached"}
    with torch.no_grad():
        model.features[0][0].weight.mul_(1.5)  # other weights: another model
    # What optimize() runs (live_model.write_config, then load().run()), up to the export:
    # the question is whether the new weights make another key; smoke ran above.
    written_again = write_config(model, {"image": torch.randn(2, 3, 64, 64)}, **options)
    again = deploy.load(written_again).run(to="export")
    assert written_again == written and again.stages["export"].status is Status.RAN


class NeedsArguments(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@pytest.mark.triton
def test_a_stock_model_needs_only_itself_and_an_example(tmp_path: Path, cli: Cli) -> None:
    """shufflenet's class needs constructor arguments: the live module is pickled for the
    stages; dim 0 is the batch (1..8) without being asked."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.shufflenet_v2_x0_5(weights=None, num_classes=10).eval()
    result = deploy.optimize(model, torch.randn(1, 3, 64, 64), workdir=tmp_path)
    assert result.ok and result.stages["smoke"].status is Status.RAN, result
    written = tmp_path / "shuffle_net_v2" / "shuffle_net_v2.yaml"
    config = yaml.safe_load(written.read_text())
    assert config["inputs"][0]["dims"][0] == "batch" and config["inputs"][0]["max"][0] == 8
    assert config["model"]["file"].endswith("shuffle_net_v2_module.py") and "factory" not in config["model"]
    plan = cli("plan", str(written), "--json")
    assert {row["action"] for row in json.loads(plan.stdout)} == {"cached"}, plan.stdout


def test_a_model_that_takes_no_other_batch_is_served_at_the_examples_shapes(tmp_path: Path) -> None:
    from deploy.live_model import _config_for
    from deploy.live_source import source_entry as _source

    model = FixedBatch()
    source = _source(model, tmp_path, "fixed", None, None, {"x": torch.ones(2, 3)})
    assert source["factory"] == f"{__name__}:FixedBatch"  # builds with no arguments: its class
    text = _config_for(model, "fixed", source, {"x": torch.ones(2, 3)}, None, tmp_path)
    config = yaml.safe_load(text)
    assert config["inputs"][0]["dims"] == [2, 3], config["inputs"]
    # Its header names what wrote it: this API, not `deploy init`.
    assert text.startswith("# Written by `deploy.optimize` for 'fixed'"), text[:120]


def test_a_class_that_needs_arguments_is_pickled_and_rebuilt_equal(tmp_path: Path) -> None:
    import importlib.util

    from deploy.live_source import source_entry as _source

    torch.manual_seed(0)
    model = NeedsArguments(3).eval()
    source = _source(model, tmp_path, "needs", None, None, {"x": torch.ones(2, 3)})
    assert source["file"].endswith("needs_module.py") and source["callable"] == "build"
    spec = importlib.util.spec_from_file_location("needs_module", source["file"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.randn(4, 3)
    assert torch.equal(module.build()(x), model(x))
    first = Path(source["file"]).read_text()
    with torch.no_grad():
        model.fc.bias.add_(1.0)
    assert (
        Path(_source(model, tmp_path, "needs", None, None, {"x": x})["file"]).read_text() != first
    )  # new key


class FixedBatch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(2, 3) * 2  # a batch of 2, always


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


SCRIPT = """
import sys

import torch
from deploy.live_model import write_config

K = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0  # read at run time: no code changes


def act(x):
    return torch.relu(x)


class Net(torch.nn.Module):
    def __init__(self, shift):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)  # tuple settings (kernel_size, stride)
        self.scale = 2.0
        self.register_buffer("shift", torch.tensor(shift), persistent=False)  # in no state_dict

    def forward(self, x):
        return act(self.conv(x)) * self.scale * K + self.shift


torch.manual_seed(0)
model = Net(0.5).eval()  # the script holds the model, as scripts do
write_config(model, torch.randn(2, 1, 8, 8), workdir="work")
"""


def test_a_script_s_own_model_keeps_its_key_across_runs_and_changes_it_with_what_it_computes(
    tmp_path: Path,
) -> None:
    """A class defined in the script goes by value (cloudpickle), and the pickle's bytes
    differ per process (torch.save's and cloudpickle's random ids): the generated module
    names a digest of the script's code and globals, the modules' settings and buffers and
    the weights instead, so a rerun keys the same and any change to what the model computes
    keys anew (a stale pickle would serve the old model)."""
    import os
    import subprocess
    import sys

    from tests.helpers import ROOT

    def written(script: str, *args: str) -> tuple[str, bytes]:
        (tmp_path / "first.py").write_text(script)
        done = subprocess.run(
            [sys.executable, "first.py", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        work = tmp_path / "work" / "net"
        return (work / "net_module.py").read_text(), (work / "net.module.pt").read_bytes()

    first, pickled = written(SCRIPT)
    again, kept = written(SCRIPT)
    assert again == first and kept == pickled  # nothing rewritten: the same key
    changed = [
        written(SCRIPT.replace("torch.relu(x)", "torch.tanh(x)"))[0],  # a function forward calls
        written(SCRIPT.replace("self.scale = 2.0", "self.scale = 3.0"))[0],  # a setting
        written(SCRIPT.replace("Net(0.5)", "Net(0.7)"))[0],  # a non-persistent buffer
        written(SCRIPT, "3")[0],  # a global read from the command line
    ]
    assert len({first, *changed}) == 5, "a change kept the key: a stale pickle would serve"


@pytest.mark.parametrize("examples", [{}, []])
def test_no_examples_are_a_config_error_saying_so(examples, tmp_path: Path) -> None:
    """It said "examples must be torch tensors ... got a dict" of an empty one."""
    with pytest.raises(
        deploy.ConfigError, match="no example inputs: deploy serves models that take at least one tensor"
    ):
        deploy.optimize(nn.Linear(3, 2), examples, workdir=tmp_path)


@pytest.mark.parametrize(
    ("examples", "said"),
    [
        (np.zeros((2, 4), np.float32), "got a ndarray"),
        ([0.5] * 4, "got input0: float, input1: float"),
        ({"x": [1.0, 2.0]}, "got x: list"),
    ],
)
def test_examples_that_are_not_tensors_are_a_config_error_saying_so(examples, said, tmp_path: Path) -> None:
    """Not numpy's or torch's AttributeError from deep inside."""
    with pytest.raises(ConfigError, match=rf"example_inputs: examples must be torch tensors .*{said}"):
        write_config(nn.Linear(4, 3), examples, workdir=tmp_path)


def test_examples_the_model_cannot_take_are_a_config_error_importable_from_deploy(tmp_path: Path) -> None:
    """One of the documented types, as `deploy.ConfigError`, not an internal ForwardRaised."""
    with pytest.raises(
        deploy.ConfigError, match=r"example_inputs: the model does not run on them: .*mat1 and mat2"
    ):
        write_config(nn.Linear(4, 3), torch.randn(2, 5), workdir=tmp_path)


class TiedHead(nn.Module):
    """GPT-2's shape of tying: the output head is the token embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(input_ids))


def test_tied_weights_are_saved_and_load_back_the_same_model(tmp_path: Path) -> None:
    """safetensors refuses two names on one storage: optimize raised its bare RuntimeError
    for GPT-2, a tied Llama or any `self.b = self.a`."""
    from safetensors.torch import load_file

    from deploy.live_source import _save_weights

    torch.manual_seed(0)
    model = TiedHead()
    fresh = TiedHead()
    fresh.load_state_dict(load_file(_save_weights(model, tmp_path / "tied.safetensors")))
    ids = torch.tensor([[1, 7, 9]])
    assert torch.equal(fresh(ids), model(ids))
    assert fresh.head.weight is fresh.embed.weight  # still one parameter


def test_a_compiled_module_deploys_the_module_it_wraps(tmp_path: Path) -> None:
    """torch.compile's OptimizedModule failed both exporters (a dynamo-optimized function)."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(3, 2)).eval()
    config = deploy.live_model.write_config(torch.compile(inner), torch.randn(2, 3), workdir=tmp_path)
    assert config.name == "sequential.yaml"  # named, and so built, from the wrapped module
    result = deploy.load(config).run(only=["golden", "export"])
    assert result.ok, result


class _Hangs(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        time.sleep(600)
        return x


def test_a_live_model_whose_forward_hangs_is_stopped_at_the_call_timeout(tmp_path: Path, monkeypatch) -> None:
    """optimize calls the live model in the caller's process (it is the caller's object): a
    forward that never returned kept it waiting for ever, $DEPLOY_CALL_TIMEOUT_S or not."""
    import time

    from deploy.pipeline.errors import ExitCode
    from deploy.pipeline.process.child_call import CallEnded

    monkeypatch.setenv("DEPLOY_CALL_TIMEOUT_S", "2")
    began = time.monotonic()
    with pytest.raises(CallEnded, match=r"did not return within 2 s") as ended:
        write_config(_Hangs(), torch.randn(2, 8), workdir=tmp_path)
    assert ended.value.exit_code is ExitCode.LIMIT and time.monotonic() - began < 60
    assert not list(tmp_path.rglob("*.yaml"))  # no config for a model that never answered
