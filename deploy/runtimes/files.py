"""A model file run here, by the runtime its suffix names (runtimes/catalog.py's
`for_suffix`: ONNX Runtime for `.onnx`, OpenVINO for an IR's `.xml`, computing in f32 or in
bf16 for an IR served as bf16, torch for an AOTInductor package's `.pt2`). Used where a
served file is checked against its own local answers (smoke's reduced-precision references)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploy.domain.vocabulary import ModelSuffix

SUFFIXES = {ModelSuffix.ONNX: "ONNX Runtime", ModelSuffix.IR: "OpenVINO", ModelSuffix.PT2: "AOTInductor"}


def runtime_for(path: Path, outputs: Sequence[str] | None = None, precision: str = "fp32") -> Any:
    """`precision`: what the file is served as; an IR served as bf16 is computed in bf16
    (an AOTInductor package computes in the precision it was compiled in)."""
    from deploy.runtimes.catalog import for_suffix

    plugin = for_suffix(path.suffix)
    if plugin is None or plugin.load_file is None:
        raise ValueError(f"{path.name}: no runtime runs a '{path.suffix}' file")
    return plugin.load_file(path, outputs, precision)


def newest_model_file(model_dir: Path) -> Path | None:
    """The model file (ONNX or IR) of the highest version in a Triton model dir."""
    found = [p for p in model_dir.glob("*/model.*") if p.suffix in SUFFIXES and p.parent.name.isdigit()]
    return max(found, key=lambda p: int(p.parent.name), default=None)
