"""The model's I/O as users write it: outputs found in dicts, ModelOutputs, nested
results and tuples; inputs passed by position or keyword; one config error naming what
the model returned when the declared outputs are not there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from deploy.modelio.adapter import adapt
from deploy.pipeline.errors import ConfigError
from deploy.spec.config import DeployConfig


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


# -- per-image detections, list inputs, forward's other arguments --------------------------------
class Detector(nn.Module):
    """torchvision's detection interface: a list of images in, one dict per image out, the
    number of rows depending on the image (here: the pixels above 0.5, as boxes)."""

    def forward(self, images: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        found = []
        for image in images:
            keep = image[0].flatten() > 0.5
            scores = image[0].flatten()[keep]
            found.append(
                {"boxes": scores[:, None].repeat(1, 4), "scores": scores, "labels": keep.nonzero()[:, 0]}
            )
        return found


def detection_config(
    max_detections: int = 5, outputs: tuple[str, ...] = ("boxes", "scores", "labels")
) -> DeployConfig:
    spec = {
        "name": "images",
        "dims": [1, 1, 4, 4],
        "min": [1, 1, 4, 4],
        "opt": [1, 1, 4, 4],
        "max": [1, 1, 4, 4],
    }
    return DeployConfig.model_validate(
        {
            "name": "det",
            "batch_dim": None,
            "model": {"factory": "torch.nn:Identity", "detections": {"max_detections": max_detections}},
            "inputs": [spec],
            "outputs": [{"name": n} for n in (*outputs, "num_detections")],
            "stages": {"golden": {}},
        }
    )


def image(values: list[float]) -> dict[str, np.ndarray]:
    return {"images": np.array(values, dtype=np.float32).reshape(1, 1, 4, 4)}


def test_per_image_detections_are_padded_to_max_detections_with_a_count() -> None:
    adapter = adapt(Detector(), detection_config(5), image([0.9, 0.1, 0.7] + [0.0] * 13))
    boxes, scores, labels, count = call(adapter, image([0.9, 0.1, 0.7] + [0.0] * 13))
    assert (
        boxes.shape == (1, 5, 4)
        and scores.shape == (1, 5)
        and labels.shape == (1, 5)
        and count.tolist() == [2]
    )
    assert scores[0].tolist() == pytest.approx([0.9, 0.7, 0, 0, 0]) and labels[0].tolist() == [0, 2, 0, 0, 0]
    # More rows than max_detections: the first ones (the model's order), the count capped.
    many = call(adapter, image([0.6 + 0.01 * i for i in range(16)]))
    assert many[3].tolist() == [5] and many[1][0].tolist() == pytest.approx([0.6, 0.61, 0.62, 0.63, 0.64])


def test_per_image_dicts_without_detections_name_the_setting() -> None:
    plain = detection_config().model_copy(
        update={"model": detection_config().model.model_copy(update={"detections": None})}
    )
    with pytest.raises(ConfigError) as info:
        adapt(Detector(), plain, image([0.9] * 16))
    assert (
        "model.detections: the model returns one dict per image (1 here: boxes ['n', 4], scores ['n']"
        in str(info.value)
    )
    assert "set model.detections: {max_detections: 100}" in str(info.value)


def test_a_construct_the_layout_does_not_cover_is_refused_naming_it() -> None:
    class Nested(nn.Module):
        def forward(self, images: list[torch.Tensor]) -> list[dict[str, object]]:
            return [{"boxes": image.flatten()[:, None].repeat(1, 4), "parts": [image]} for image in images]

    with pytest.raises(
        ConfigError, match=r"model.detections: image 0's 'parts' is a list, not a tensor \(not supported\)"
    ):
        adapt(Nested(), detection_config(outputs=("boxes",)), image([0.5] * 16))


def test_deploys_own_output_matching_is_told_apart_from_the_models_forward() -> None:
    """The outputs were found when probed; at another shape the model returns fewer: it is
    deploy's picking that fails, and the message says so (not 'the model's forward raised')."""
    from deploy.modelio.adapter import OutputMatchingFailed
    from deploy.runtimes.torchrt import TorchModule

    class PerRow(nn.Module):
        def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
            return [row for row in x]  # one tensor per sample: position 1 exists only from batch 2

    adapter = adapt(PerRow(), config([{"name": "a", "path": "1"}]), feeds())
    runtime = TorchModule(adapter, ["x"], ["a"])
    with pytest.raises(OutputMatchingFailed) as info:
        runtime.infer({"x": np.zeros((1, 4), np.float32)})
    text = str(info.value)
    assert text.startswith(
        "deploy's output matching (not the model): '1' is not in what the model returned for x [1, 4]"
    )
    assert "the model's forward raised" not in text


def test_forward_arguments_beyond_the_inputs_keep_their_defaults_or_take_forward_kwargs() -> None:
    class Scaled(nn.Module):
        def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            return x * scale

    plain = adapt(Scaled(), config([{"name": "y"}]), feeds())
    assert not plain.plain and plain.binding.extras == ("scale",)  # the exporter sees the adapter
    fixed = config([{"name": "y"}]).model_copy(
        update={"model": config([{"name": "y"}]).model.model_copy(update={"forward_kwargs": {"scale": 3.0}})}
    )
    (out,) = call(adapt(Scaled(), fixed, feeds()), feeds())
    assert torch.equal(out, 3 * torch.from_numpy(feeds()["x"]))
    wrong = fixed.model_copy(
        update={"model": fixed.model.model_copy(update={"forward_kwargs": {"scael": 3.0}})}
    )
    with pytest.raises(ConfigError, match=r"model.forward_kwargs: .*scael"):
        adapt(Scaled(), wrong, feeds())
