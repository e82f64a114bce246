"""Inputs bind by name (a typo or a silent swap is a config error, not a model fed the
wrong tensor), and the probe (`deploy validate --probe`, golden's first step) turns the
mistakes users make — channels-last dims, an integer dtype on a CNN, a misspelt output
name — into one config error naming the key and the fix."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from deploy.gates.references import probe_sample
from deploy.modelio.adapter import adapt
from deploy.modelio.probe import probe
from deploy.pipeline.errors import ConfigError
from deploy.spec.config import DeployConfig
from tests.helpers import run_cli


class TwoInputs(nn.Module):
    """Not symmetric in its inputs: feeding one for the other changes the answer."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return input_ids * 3 - attention_mask


class Star(nn.Module):
    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return tensors[0] * 3 - tensors[1]


def config(names: tuple[str, ...], inputs_by: str = "auto", **model: Any) -> DeployConfig:
    specs = [{"name": n, "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [4, 4]} for n in names]
    return DeployConfig.model_validate(
        {
            "name": "bind",
            "model": {"factory": "torch.nn:Identity", "inputs_by": inputs_by, **model},
            "inputs": specs,
            "outputs": [{"name": "out"}],
            "stages": {"golden": {}},
        }
    )


def sample(names: tuple[str, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {n: rng.standard_normal((2, 4)).astype(np.float32) for n in names}


def answer(model: nn.Module, cfg: DeployConfig, feeds: dict[str, np.ndarray]) -> np.ndarray:
    adapter = adapt(model, cfg, feeds)
    with torch.no_grad():
        (out,) = adapter(*(torch.from_numpy(feeds[n]) for n in cfg.input_names()))
    return out.numpy()


def test_inputs_declared_in_another_order_are_bound_by_name() -> None:
    names = ("attention_mask", "input_ids")
    feeds = sample(names)
    want = feeds["input_ids"] * 3 - feeds["attention_mask"]
    np.testing.assert_array_equal(answer(TwoInputs(), config(names), feeds), want)


def test_a_misspelt_input_is_a_config_error_with_did_you_mean() -> None:
    names = ("input_idz", "attention_mask")
    with pytest.raises(
        ConfigError, match=r"model\.inputs: 'input_idz' \(did you mean 'input_ids'\?\)"
    ) as err:
        adapt(TwoInputs(), config(names), sample(names))
    assert "forward(input_ids, attention_mask)" in str(err.value)


def test_several_inputs_none_named_after_forward_must_state_their_binding() -> None:
    names = ("a", "b")
    with pytest.raises(ConfigError, match=r"model\.inputs_by: none of the declared inputs \['a', 'b'\]"):
        adapt(TwoInputs(), config(names), sample(names))
    feeds = sample(names)  # stated: by position, in declared order
    np.testing.assert_array_equal(
        answer(TwoInputs(), config(names, "position"), feeds), feeds["a"] * 3 - feeds["b"]
    )


def test_position_with_forward_names_in_another_order_is_refused() -> None:
    names = ("attention_mask", "input_ids")
    with pytest.raises(ConfigError, match=r"in another order \(input_ids, attention_mask\)"):
        adapt(TwoInputs(), config(names, "position"), sample(names))


@pytest.mark.parametrize(("model", "names"), [(Star(), ("p", "q")), (nn.Identity(), ("image",))])
def test_position_stays_the_default_for_one_input_or_star_args(
    model: nn.Module, names: tuple[str, ...]
) -> None:
    feeds = sample(names)
    got = answer(model, config(names), feeds)
    want = feeds[names[0]] if len(names) == 1 else feeds["p"] * 3 - feeds["q"]
    np.testing.assert_array_equal(got, want)


# -- the probe --------------------------------------------------------------------------------
MODELS = """
import torch
class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8, 5)
    def forward(self, image):
        return {"logits": self.fc(self.conv1(image).mean((2, 3)))}
def cnn():
    return Cnn()
"""


def cnn_config(tmp_path: Path, **change: Any) -> Path:
    (tmp_path / "models.py").write_text(MODELS)
    image = {"name": "image", "dtype": "float32", "dims": ["batch", 3, 16, 16]}
    image |= {"min": [1, 3, 16, 16], "opt": [2, 3, 16, 16], "max": [4, 3, 16, 16]}
    data = {
        "name": "probe",
        "model": {"file": "models.py", "callable": "cnn"},
        "inputs": [image | change.get("image", {})],
        "outputs": [{"name": change.get("output", "logits")}],
        "stages": {"export": {"exporter": "torchscript"}},
    }
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def load(path: Path) -> DeployConfig:
    from deploy.pipeline.graph.project import load_project

    return load_project(path).config


NHWC = {"dims": ["batch", 16, 16, 3], "min": [1, 16, 16, 3], "opt": [2, 16, 16, 3], "max": [4, 16, 16, 3]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"image": NHWC},
            r"inputs\[0\]\.dims: .*channels last.*'conv1' \(Conv2d\) takes 3 channels.*\[1, 3, 16, 16\]",
        ),
        (
            {"image": {"dtype": "int64", "value_range": [0, 255]}},
            r"inputs\[0\]\.dtype: .*int64.*'conv1'.*float32",
        ),
        (
            {"output": "logit"},
            r"outputs\[0\]: 'logit': no key 'logit' \(did you mean 'logits'\?\) in the model's dict",
        ),
    ],
)
def test_the_probe_names_the_config_key_and_the_fix(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        config = load(cnn_config(tmp_path, **change))
        probe(config, probe_sample(config))


def test_validate_probe_is_one_message_and_exit_3_and_plain_validate_builds_nothing(tmp_path: Path) -> None:
    path = cnn_config(tmp_path, image=NHWC)
    plain = run_cli("validate", str(path))
    assert plain.returncode == 0, plain.stderr  # plain validate reads the config only
    probed = run_cli("validate", str(path), "--probe")
    assert probed.returncode == 3, probed.stdout + probed.stderr
    assert "inputs[0].dims" in probed.stdout + probed.stderr and "Traceback" not in probed.stderr
    good = run_cli("validate", str(cnn_config(tmp_path)), "--probe")
    assert good.returncode == 0 and "probed at the min shape" in good.stdout


class Unbatched(nn.Module):
    """Takes one [3, H, W] image (no batch dim) and adds the batch dim itself."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.unsqueeze(0)).mean((2, 3))


class DictIn(nn.Module):
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["x"] + batch["y"]


@pytest.mark.parametrize("inputs_by", ["position", "keyword"])
def test_a_forward_taking_its_inputs_in_one_dict_is_told_to_wrap_it(inputs_by: str) -> None:
    """The advice used to be 'set model.inputs_by to position or keyword', whichever was set."""
    cfg = config(("x", "y"), inputs_by=inputs_by)
    with pytest.raises(ConfigError) as info:
        adapt(DictIn(), cfg, sample(("x", "y")))
    said = str(info.value)
    assert "forward takes one argument for 2 declared inputs" in said and "forward(x, y)" in said, said
    assert "set model.inputs_by" not in said


def test_a_last_dim_a_linear_layer_cannot_take_is_named_with_its_field() -> None:
    """Not torch's `mat1 and mat2 shapes cannot be multiplied`: the field and the layer."""
    from deploy.modelio.probe import checked

    cfg = config(("x",))
    cfg = cfg.model_copy(update={"inputs": (cfg.inputs[0].model_copy(update={"dims": ("batch", 5)}),)})
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)}
    message = r"inputs\[0\]\.dims: 'x' has 5 in its last dim \['batch', 5\], but the model's first layer 'fc' \(Linear\) takes 4"
    with pytest.raises(ConfigError, match=message):
        checked(nn.Sequential(OrderedDict(fc=nn.Linear(4, 3))).eval(), cfg, feeds)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ([8, 8, 3], r"declared \[8, 8, 3\] \(channels last.*declare dims \[3, 8, 8\], min \[3, 8, 8\]"),
        ([4, 8, 8], r"'x' has 4 in dim 0 \[4, 8, 8\], but the model's first layer 'conv'"),
    ],
)
def test_without_a_batch_dim_the_probe_points_at_the_declared_dim(dims: list[int], message: str) -> None:
    """The layer's dim 1 is the declared dim 0 where forward adds the batch dim itself."""
    from deploy.modelio.probe import checked

    cfg = DeployConfig.model_validate(
        {
            "name": "unbatched",
            "model": {"factory": "torch.nn:Identity"},
            "batch_dim": None,
            "inputs": [{"name": "x", "dims": dims, "min": dims, "opt": dims, "max": dims}],
            "outputs": [{"name": "y"}],
            "stages": {"golden": {}},
        }
    )
    feeds = {"x": np.random.default_rng(0).standard_normal(dims).astype(np.float32)}
    with pytest.raises(ConfigError, match=message):
        checked(Unbatched().eval(), cfg, feeds)


class Bag(nn.Module):
    """Token ids through an embedding: the ids must be integers."""

    def __init__(self) -> None:
        super().__init__()
        self.words = nn.Embedding(50, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.words(ids).mean(1))


def test_token_ids_declared_float_are_named_by_the_probe_and_by_init(tmp_path: Path) -> None:
    """torch said `Expected tensor for argument #1 'indices' to have one of the following
    scalar types: Long, Int`; the config key and init's --input now say which input and why."""
    from deploy.modelio.probe import checked

    feeds = {"x": np.random.default_rng(0).uniform(0, 49, (2, 4)).astype(np.float32)}
    message = r"inputs\[0\]\.dtype: 'x' is declared float32, but the model's first layer 'words' \(Embedding\) looks rows up by integer index: declare dtype: int64"
    with pytest.raises(ConfigError, match=message):
        checked(Bag().eval(), config(("x",)), feeds)
    ints = {"x": feeds["x"].astype(np.int64)}
    assert checked(
        Bag().eval(),
        config(("x",)).model_copy(
            update={
                "inputs": (
                    config(("x",)).inputs[0].model_copy(update={"dtype": "int64", "value_range": (0, 49)}),
                )
            }
        ),
        ints,
    )
    source = tmp_path / "bag.py"
    source.write_text(
        "import torch\n\n\nclass Bag(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.words = torch.nn.Embedding(50, 8)\n\n    def forward(self, ids):\n        return self.words(ids).mean(1)\n\n\n"
        "def bag():\n    return Bag()\n"
    )
    said = run_cli(
        "init",
        "--file",
        str(source),
        "--callable",
        "bag",
        "--input",
        "ids:float32:1x4/2x8/4x16",
        "-o",
        str(tmp_path / "bag.yaml"),
    )
    assert said.returncode == 3 and "Traceback" not in said.stderr, said.stderr
    assert (
        "--input 'ids' is declared float32, but the model's first layer 'words' (Embedding) looks rows up by integer index"
        in said.stderr
    )
    assert not (tmp_path / "bag.yaml").exists()
