"""A model file run here, by the runtime its suffix names: ONNX Runtime for `.onnx`, and
OpenVINO, computing in FP32, for an IR's `.xml`. Used where a served file is checked
against its own local answers (smoke's reduced-precision references)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

SUFFIXES = {".onnx": "ONNX Runtime", ".xml": "OpenVINO"}


def runtime_for(path: Path, outputs: Sequence[str] | None = None) -> Any:
    if path.suffix == ".xml":
        from deploy.runtimes.openvinort import Compute, OpenVino

        return OpenVino(path, outputs=outputs, compute=Compute.F32)
    from deploy.runtimes.onnxrt import OnnxRuntime

    return OnnxRuntime(path, outputs=outputs)


def newest_model_file(model_dir: Path) -> Path | None:
    """The model file (ONNX or IR) of the highest version in a Triton model dir."""
    found = [p for p in model_dir.glob("*/model.*") if p.suffix in SUFFIXES and p.parent.name.isdigit()]
    return max(found, key=lambda p: int(p.parent.name), default=None)
