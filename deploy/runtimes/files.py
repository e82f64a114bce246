"""A model file run here, by the runtime its suffix names: ONNX Runtime for `.onnx`,
OpenVINO for an IR's `.xml`, computing in f32 (or bf16, for an IR served as bf16), and
torch for an AOTInductor package's `.pt2`. Used where a served file is checked
against its own local answers (smoke's reduced-precision references)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploy.domain.vocabulary import ModelSuffix, Precision

SUFFIXES = {ModelSuffix.ONNX: "ONNX Runtime", ModelSuffix.IR: "OpenVINO", ModelSuffix.PT2: "AOTInductor"}


def runtime_for(path: Path, outputs: Sequence[str] | None = None, precision: str = "fp32") -> Any:
    """`precision`: what the file is served as; an IR served as bf16 is computed in bf16
    (an AOTInductor package computes in the precision it was compiled in)."""
    if path.suffix == ModelSuffix.PT2:
        from deploy.runtimes import inductorrt

        return inductorrt.load_file(path, outputs)
    if path.suffix == ModelSuffix.IR:
        from deploy.runtimes.openvinort import Compute, OpenVino

        compute = Compute.BF16 if precision == Precision.BF16 else Compute.F32
        return OpenVino(path, outputs=outputs, compute=compute)
    from deploy.runtimes.onnxrt import OnnxRuntime

    return OnnxRuntime(path, outputs=outputs)


def newest_model_file(model_dir: Path) -> Path | None:
    """The model file (ONNX or IR) of the highest version in a Triton model dir."""
    found = [p for p in model_dir.glob("*/model.*") if p.suffix in SUFFIXES and p.parent.name.isdigit()]
    return max(found, key=lambda p: int(p.parent.name), default=None)
