"""Running an ONNX file in ONNX Runtime (CPU) on golden inputs; imports onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from pipeline.config import DeployConfig, Label
from pipeline.errors import StageFailed
from stages._golden import Case


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: warnings go nowhere useful
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise StageFailed(f"ONNX Runtime cannot load the model: {exc}") from exc


def run_golden(
    sess: ort.InferenceSession, config: DeployConfig, golden: dict[Label, Case]
) -> dict[Label, dict[str, np.ndarray]]:
    names = [spec.name for spec in config.outputs]
    missing = sorted(set(names) - {o.name for o in sess.get_outputs()})
    if missing:
        raise StageFailed(f"the ONNX model has no output(s) {missing}")
    results = {}
    for label, case in golden.items():
        values = sess.run(names, case.inputs)
        results[label] = dict(zip(names, values))
    return results
