"""A tiny CNN for tests and quick runs: 8x8 single-channel images, 10 classes.

Sized for scikit-learn's bundled digits images, so tests can train it in seconds
and gate on real accuracy rather than on random weights.
"""

from __future__ import annotations

import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


def tiny_cnn(width: int = 8, classes: int = 10) -> TinyCNN:
    return TinyCNN(width, classes)
