"""GPU timing shared by the CUDA runtimes, split the way trtexec reports it: H2D copy of
the inputs from pinned host memory, GPU compute, D2H copy of the outputs into pinned host
memory, each timed per call with CUDA events on the current stream; the host wall time
of the whole call is the latency the harness measures around it.

The PyTorch path ran on an H100 (docs/concepts/tensorrt.md); TensorRT shares it but never ran here.
Imports torch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from deploy.pipeline.errors import StageFailed
from deploy.runtimes.timing import Timed


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise StageFailed("device: cuda, but torch sees no CUDA GPU (torch.cuda.is_available() is False)")


def timed(h2d: Callable[[], None], compute: Callable[[], None], d2h: Callable[[], None]) -> Timed:
    """A call that runs the three steps back to back on the current stream, waits for the
    last, and appends their GPU times (ms) to the returned record."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    phases: list[tuple[float, float, float]] = []

    def call() -> None:
        events[0].record()
        h2d()
        events[1].record()
        compute()
        events[2].record()
        d2h()
        events[3].record()
        events[3].synchronize()
        phases.append(tuple(events[i].elapsed_time(events[i + 1]) for i in range(3)))  # type: ignore[arg-type]

    return Timed(call, phases)


def pinned(arrays: list[np.ndarray]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Pinned host copies of the arrays, and device buffers of the same shape."""
    host = [torch.from_numpy(np.require(a, requirements="C")).pin_memory() for a in arrays]
    return host, [torch.empty_like(h, device="cuda") for h in host]


def copy(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    for target, source in zip(targets, sources):
        target.copy_(source, non_blocking=True)


def pinned_like(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.empty_like(t, device="cpu").pin_memory() for t in tensors]
