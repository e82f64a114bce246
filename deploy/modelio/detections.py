"""Per-image detections as fixed-shape tensors. torchvision's detection models (SSD,
RetinaNet, FCOS, Faster R-CNN) answer a list with one dict per image, each tensor with
one row per detection, their number varying with the image. Served, that is a fixed
layout: every tensor cut or zero-padded to `max_detections` rows and stacked over the
batch, and the per-image number of valid rows beside them (TensorRT's EfficientNMS
plugin and Triton clients read exactly this: num_detections, boxes, scores, classes).

The padding is written with tensor operations only (concatenate zeros, slice), so both
ONNX exporters trace it with the row count dynamic. Imports torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError
from deploy.spec.tensors import Detections

WHERE = "model.detections"


def padded(result: Any, spec: Detections) -> dict[str, torch.Tensor]:
    """{key: [batch, max_detections, ...]} for each key of the per-image dicts, and
    {spec.count: [batch]} (int64), the valid rows of each image."""
    images = per_image(result)
    keys = list(images[0])
    found = {k: torch.stack([rows(image[k], spec.max_detections) for image in images]) for k in keys}
    found[spec.count] = torch.stack([count(image[keys[0]], spec.max_detections) for image in images])
    return found


def rows(tensor: torch.Tensor, k: int) -> torch.Tensor:
    """The first k rows, zeros after them: always k rows (concatenate, then slice)."""
    filler = tensor.new_zeros((k, *tensor.shape[1:]))
    return torch.cat([tensor[:k], filler], 0)[:k]


def count(tensor: torch.Tensor, k: int) -> torch.Tensor:
    """How many of the k rows are valid, as an int64 scalar computed from the tensor
    (not a Python int, which tracing would freeze into a constant)."""
    first = tensor if tensor.dim() == 1 else tensor.flatten(1)[:, 0]
    return torch.ones_like(first, dtype=torch.int64).sum().clamp(max=k)


def per_image(result: Any) -> list[Mapping[str, torch.Tensor]]:
    """`result` as a list of per-image dicts of tensors with rows, or a ConfigError naming
    what it is instead (the constructs this layout does not cover)."""
    if not isinstance(result, list | tuple) or not result or not all(isinstance(r, Mapping) for r in result):
        kind = type(result).__name__
        raise ConfigError(
            WHERE, [Issue(WHERE, f"the model returns a {kind}, not a list with one dict per image")]
        )
    problems = [
        p for index, image in enumerate(result) for p in _image_problems(index, image, list(result[0]))
    ]
    if problems:
        raise ConfigError(WHERE, [Issue(WHERE, p) for p in problems])
    return list(result)


def _image_problems(index: int, image: Mapping[str, Any], keys: list[str]) -> list[str]:
    if list(image) != keys:
        return [f"image {index} has keys {list(image)}, image 0 has {keys}: every image needs the same keys"]
    found = []
    for key, value in image.items():
        if not isinstance(value, torch.Tensor):
            found.append(f"image {index}'s '{key}' is a {type(value).__name__}, not a tensor (not supported)")
        elif value.dim() == 0:
            found.append(f"image {index}'s '{key}' is a scalar: per-image tensors need one row per detection")
    return found


def hint(result: Any) -> list[Issue]:
    """Where a model's outputs could not be found and it returns per-image dicts: the setting
    that serves it, with the outputs to declare."""
    if not isinstance(result, list | tuple) or not result or not isinstance(result[0], Mapping):
        return []
    image = result[0]
    shapes = ", ".join(
        f"{k} {['n', *list(v.shape[1:])]}" for k, v in image.items() if isinstance(v, torch.Tensor)
    )
    names = ", ".join([*map(str, image), "num_detections"])
    return [
        Issue(
            WHERE,
            f"the model returns one dict per image ({len(result)} here: {shapes}) with a varying number of rows: set "
            f"model.detections: {{max_detections: 100}} and declare the outputs {names}",
        )
    ]
