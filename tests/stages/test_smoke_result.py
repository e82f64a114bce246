"""smoke.json as a record: per-model results (parity tables per protocol, the batching
burst, skipped models' reasons) and the server come back from JSON as written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gates import parity
from gates.references import Case
from gates.tolerance import Tolerance
from pipeline.records import SchemaMismatch
from serving.checks import Burst
from stages.smoke import result
from stages.smoke.result import ModelResult, ModelStatus, ServerInfo, SmokeReport


def report() -> SmokeReport:
    ref = {"y": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)}
    golden = {"min": Case({}, ref), "opt": Case({}, ref)}
    table = parity.compare({"min": {"y": ref["y"]}, "opt": {"y": ref["y"] * 1.5}}, golden, Tolerance())
    tested = ModelResult(ModelStatus.FAILED, "onnx", "fp32", "python", reference="eager PyTorch")
    tested.problems = parity.failures(table, Tolerance())
    tested.protocols = {"http": table, "grpc": table}
    tested.batching = Burst(requests=8, inferences=8, executions=3, rounds=2)
    skipped = ModelResult(ModelStatus.SKIPPED, "plan", "fp32", "tensorrt", reason="no tensorrt backend")
    server = ServerInfo("auto", "2.51.0", "127.0.0.1:8000", "127.0.0.1:8001", ["python"], ["a note"])
    return SmokeReport({"m_onnx": tested, "m_plan": skipped}, server)


def test_smoke_report_round_trip(tmp_path: Path) -> None:
    written = report()
    assert written.models["m_onnx"].problems, "the scaled output must fail parity at opt"
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps(written.to_json()))
    assert json.loads(path.read_text())["models"]["m_onnx"]["batching"]["batched"] is True
    assert SmokeReport.read(path) == written


def test_a_smoke_report_without_models_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps({"schema": result.SCHEMA, "server": None}))
    with pytest.raises(SchemaMismatch, match=r"smoke\.json: not a smoke report"):
        SmokeReport.read(path)
