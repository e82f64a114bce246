"""The model's I/O as users write it: outputs found in dicts, ModelOutputs, nested
results and tuples; inputs passed by position or keyword; one config error naming what
the model returned when the declared outputs are not there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from modelio.adapter import adapt
from pipeline.config import DeployConfig
from pipeline.errors import ConfigError


def config(
    outputs: list[dict[str, Any]], inputs: tuple[str, ...] = ("x",), inputs_by: str = "auto"
) -> DeployConfig:
    specs = [{"name": n, "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [4, 4]} for n in inputs]
    return DeployConfig.model_validate(
        {
            "name": "io",
            "model": {"factory": "torch.nn:Identity", "inputs_by": inputs_by},
            "inputs": specs,
            "outputs": outputs,
            "stages": {"golden": {}},
        }
    )


def feeds(names: tuple[str, ...] = ("x",)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal((2, 4)).astype(np.float32) for n in names}


class Returns(nn.Module):
    """Returns `make(x, y)` where y = 2x + 1: each test shapes the result its own way."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    def forward(self, x: torch.Tensor) -> Any:
        return self.make(x, 2 * x + 1)


def call(adapter: nn.Module, sample: dict[str, np.ndarray]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return adapter(*(torch.from_numpy(v) for v in sample.values()))


def test_a_dict_output_is_matched_by_key_and_extra_keys_are_dropped():
    model = Returns(lambda x, y: {"aux": x, "out": y})  # deeplabv3's shape: {"out", "aux"}
    (out,) = call(adapt(model, config([{"name": "out"}]), feeds()), feeds())
    assert torch.equal(out, 2 * torch.from_numpy(feeds()["x"]) + 1)


def test_a_model_output_is_matched_by_field_and_unset_fields_are_skipped():
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    model = Returns(lambda x, y: BaseModelOutputWithPooling(last_hidden_state=x, pooler_output=y))
    adapter = adapt(model, config([{"name": "pooler_output"}, {"name": "last_hidden_state"}]), feeds())
    pooled, hidden = call(adapter, feeds())
    assert torch.equal(hidden, torch.from_numpy(feeds()["x"])) and not torch.equal(pooled, hidden)


def test_a_path_reaches_into_nested_results_and_a_tuple_is_taken_by_position():
    nested = Returns(lambda x, y: {"a": (x, [y, x * 3])})
    (third,) = call(adapt(nested, config([{"name": "t", "path": "a.1.1"}]), feeds()), feeds())
    assert torch.equal(third, torch.from_numpy(feeds()["x"]) * 3)
    pair = Returns(lambda x, y: (y, x))
    first, second = call(adapt(pair, config([{"name": "p"}, {"name": "q"}]), feeds()), feeds())
    assert torch.equal(second, torch.from_numpy(feeds()["x"])) and not torch.equal(first, second)


def test_outputs_that_are_not_there_are_one_config_error_naming_what_was_found():
    model = Returns(lambda x, y: {"out": x, "aux": y})
    with pytest.raises(ConfigError) as info:
        adapt(model, config([{"name": "logits"}, {"name": "z", "path": "out.7"}]), feeds())
    text = str(info.value)
    assert (
        "outputs[0]: 'logits': no key 'logits'" in text and "outputs[1]: 'z': path 'out.7' has no '7'" in text
    )
    assert "a dict with 2 tensor(s): out [2, 4], aux [2, 4]" in text
    with pytest.raises(ConfigError, match=r"declares 1 output\(s\); the model returns a tuple with 2 tensor"):
        adapt(Returns(lambda x, y: (x, y)), config([{"name": "p"}]), feeds())


class Keywords(nn.Module):
    """A Hugging Face-style forward: only keywords, in an order unlike the config's."""

    def forward(self, **kwargs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": kwargs["input_ids"] - kwargs["attention_mask"]}


class Reordered(nn.Module):
    def forward(self, attention_mask: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        return input_ids - attention_mask


@pytest.mark.parametrize(
    ("model", "inputs_by"), [(Keywords(), "keyword"), (Keywords(), "auto"), (Reordered(), "auto")]
)
def test_inputs_are_passed_by_keyword_when_asked_when_forward_names_them_or_takes_only_kwargs(
    model, inputs_by
):
    names = ("input_ids", "attention_mask")
    sample = feeds(names)
    (out,) = call(adapt(model, config([{"name": "logits"}], names, inputs_by), sample), sample)
    assert torch.equal(out, torch.from_numpy(sample["input_ids"] - sample["attention_mask"]))


def test_inputs_that_cannot_bind_are_a_config_error_naming_forward():
    names = ("input_ids", "attention_mask")
    with pytest.raises(ConfigError, match=r"cannot be passed by position to forward\(\*\*kwargs"):
        adapt(Keywords(), config([{"name": "logits"}], names, "position"), feeds(names))
    with pytest.raises(ConfigError, match=r"cannot be passed by keyword to forward\(x"):
        adapt(Returns(lambda x, y: x), config([{"name": "o"}], ("image",), "keyword"), feeds(("image",)))


@pytest.mark.parametrize(
    ("make", "outputs", "plain"),
    [
        (lambda x, y: y, [{"name": "y"}], True),  # a tensor
        (lambda x, y: (x, y), [{"name": "a"}, {"name": "b"}], True),  # exactly the declared tuple
        (lambda x, y: (x, y), [{"name": "b", "path": "1"}], False),  # a pick among them
        (lambda x, y: {"out": y}, [{"name": "out"}], False),  # a dict
    ],
)
def test_the_exporter_sees_the_model_itself_only_where_it_needs_no_adapter(make, outputs, plain):
    model = Returns(make)
    adapter = adapt(model, config(outputs), feeds())  # `x` names forward's parameter: keyword = position
    assert adapter.plain is plain and (adapter.exportable() is model) is plain
