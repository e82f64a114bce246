"""ONNX Runtime, on CPU or CUDA. Imports onnxruntime."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from deploy.pipeline.errors import StageFailed, first_line
from deploy.runtimes.base import Device, Feeds, chosen_outputs
from deploy.runtimes.dtypes import from_onnx
from deploy.runtimes.timing import Timed

PROVIDERS = {Device.CPU: "CPUExecutionProvider", Device.CUDA: "CUDAExecutionProvider"}


class OnnxRuntime:
    def __init__(
        self,
        path: Path,
        device: Device = Device.CPU,
        threads: int | None = None,
        outputs: Sequence[str] | None = None,
    ) -> None:
        self.session = _session(path, device, threads)
        self._outputs = chosen_outputs([o.name for o in self.session.get_outputs()], outputs, "ONNX")

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._outputs

    def settings(self) -> dict[str, object]:
        """The session's knobs, reported beside its numbers (benchmarks/onnxruntime_knobs.py
        measured the alternatives: none beat these defaults here)."""
        options = self.session.get_session_options()
        return {
            "threads": options.intra_op_num_threads or "default (one per physical core)",
            "graph_optimization": options.graph_optimization_level.name,
            "execution_mode": options.execution_mode.name,
            "providers": self.session.get_providers(),
        }

    def input_types(self) -> dict[str, tuple[list[int | str | None], str]]:
        """name -> (declared shape, our dtype name), for inputs made up from the file alone."""
        return {i.name: (list(i.shape), from_onnx(i.type)) for i in self.session.get_inputs()}

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]:
        return dict(zip(self._outputs, self.session.run(list(self._outputs), dict(feeds))))

    def timed(self, feeds: Feeds) -> Timed:
        names, fixed = list(self._outputs), dict(feeds)
        return Timed(lambda: self.session.run(names, fixed))


def _session(path: Path, device: Device, threads: int | None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: warnings go nowhere useful
    if threads:
        options.intra_op_num_threads = threads
    provider = PROVIDERS[device]
    if provider not in ort.get_available_providers():
        raise StageFailed(
            f"device {device.value} needs {provider}; this onnxruntime has {ort.get_available_providers()}"
        )
    try:
        return ort.InferenceSession(str(path), options, providers=[provider])
    except Exception as exc:
        raise StageFailed(f"ONNX Runtime cannot load {path}: {first_line(exc)}") from exc
