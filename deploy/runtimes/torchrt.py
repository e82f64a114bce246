"""PyTorch modules (eager or TorchScript) fed numpy arrays, on CPU or CUDA. Imports torch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from deploy.pipeline.errors import DeployError, StageFailed, first_line
from deploy.runtimes import cuda
from deploy.runtimes.base import Device, Feeds
from deploy.runtimes.timing import Timed

# ONNX Runtime and Triton have no complex element type: the export splits it (or fails).
COMPLEX_ADVICE = (
    "a complex output, which ONNX Runtime and Triton cannot hold; return torch.view_as_real(x) "
    "(the real and imaginary parts in a last axis of 2) or its magnitude"
)
# numpy has no bfloat16, so neither has ONNX Runtime's Python API an answer of it: `.numpy()`
# raised TypeError here, and the export's check failed on it as if on a frozen shape.
UNHELD = (torch.bfloat16,)
UNHELD_ADVICE = (
    "an output numpy (so ONNX Runtime's Python API) cannot hold; return it as float32 (`.float()`)"
)


class TorchModule:
    """`inputs`: the forward's positional arguments by name; `outputs`: names for what it
    returns (tensors, nested in tuples, lists or dicts, flattened in order)."""

    def __init__(
        self,
        module: Any,
        inputs: Sequence[str],
        outputs: Sequence[str],
        device: Device = Device.CPU,
        threads: int | None = None,
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        if device is Device.CUDA:
            cuda.require_cuda()
        self.module, self.device = module.to(device.value).eval(), device
        self.inputs, self._outputs = tuple(inputs), tuple(outputs)

    @classmethod
    def torchscript(
        cls,
        path: Path,
        inputs: Sequence[str],
        outputs: Sequence[str],
        device: Device = Device.CPU,
        threads: int | None = None,
    ) -> TorchModule:
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except (RuntimeError, ValueError) as exc:  # not a TorchScript archive: the user's file, not our bug
            raise StageFailed(f"TorchScript cannot load {path}: {first_line(exc)}") from exc
        return cls(module, inputs, outputs, device, threads)

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._outputs

    def args(self, feeds: Feeds) -> tuple[torch.Tensor, ...]:
        # Copies (to the GPU, or on the CPU): a forward that writes into its input (x.mul_(2))
        # must not write into the caller's arrays, golden's inputs among them.
        return tuple(
            torch.from_numpy(np.require(feeds[name], requirements="C")).to(self.device.value, copy=True)
            for name in self.inputs
        )

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]:
        try:
            with torch.no_grad():
                result = self.module(*self.args(feeds))
        except DeployError:  # deploy's own adapter (output matching, padding) said what failed
            raise
        except Exception as exc:
            raise StageFailed(f"the model's forward raised: {type(exc).__name__}: {first_line(exc)}") from exc
        flat = flatten(result)
        if len(flat) != len(self._outputs):
            raise StageFailed(
                f"the model returns {len(flat)} output(s) but the config declares {len(self._outputs)}: {list(self._outputs)}"
            )
        complex_ = [f"{name} ({t.dtype})" for name, t in zip(self._outputs, flat) if t.is_complex()]
        if complex_:
            raise StageFailed(f"{', '.join(complex_)}: {COMPLEX_ADVICE}")
        unheld = [f"{name} ({t.dtype})" for name, t in zip(self._outputs, flat) if t.dtype in UNHELD]
        if unheld:
            raise StageFailed(f"{', '.join(unheld)}: {UNHELD_ADVICE}")
        return {name: t.detach().cpu().numpy() for name, t in zip(self._outputs, flat)}

    def timed(self, feeds: Feeds) -> Timed:
        if self.device is Device.CUDA:
            return self._timed_cuda(feeds)
        args = self.args(feeds)

        def call() -> Any:
            with torch.inference_mode():
                return self.module(*args)

        return Timed(call)

    def _timed_cuda(self, feeds: Feeds) -> Timed:
        host, device = cuda.pinned([feeds[name] for name in self.inputs])
        with torch.inference_mode():
            results = flatten(self.module(*device))
        outputs = cuda.pinned_like(results)

        def compute() -> None:
            with torch.inference_mode():
                results[:] = flatten(self.module(*device))

        return cuda.timed(lambda: cuda.copy(device, host), compute, lambda: cuda.copy(outputs, results))


def flatten(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, dict):
        return [t for v in result.values() for t in flatten(v)]
    if isinstance(result, (list, tuple)):
        return [t for v in result for t in flatten(v)]
    raise StageFailed(f"the model returned a {type(result).__name__}; outputs must be tensors")
