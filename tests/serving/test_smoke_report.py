"""smoke.json as a record: per-model results (parity tables per protocol, the concurrent
clients' traffic, skipped models' reasons) and the server come back from JSON as written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deploy.gates import parity
from deploy.gates.references import Case
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.graph.records import SchemaMismatch
from deploy.serving import smoke_report as result
from deploy.serving.smoke_report import ModelResult, ModelStatus, ServerInfo, SmokeReport, Traffic


def report() -> SmokeReport:
    ref = {"y": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)}
    golden = {"min": Case({}, ref), "opt": Case({}, ref)}
    table = parity.compare({"min": {"y": ref["y"]}, "opt": {"y": ref["y"] * 1.5}}, golden, Tolerance())
    tested = ModelResult(ModelStatus.FAILED, "onnx", "fp32", "python", reference="eager PyTorch")
    tested.problems = parity.failures(table, Tolerance())
    tested.protocols = {"http": table, "grpc": table}
    tested.traffic = Traffic(
        4, 16, 3, [1, 2, 3], rounds=1, executions=9, merged=True, merging_configured=True, mismatch_count=1
    )
    tested.traffic.mismatches.append("client 1 (grpc), request 2 (batch 3): output 'y' differs")
    skipped = ModelResult(ModelStatus.SKIPPED, "plan", "fp32", "tensorrt", reason="no tensorrt backend")
    server = ServerInfo("auto", "2.51.0", "127.0.0.1:8000", "127.0.0.1:8001", ["python"], ["a note"])
    return SmokeReport({"m_onnx": tested, "m_plan": skipped}, server)


def test_smoke_report_round_trip(tmp_path: Path) -> None:
    written = report()
    assert written.models["m_onnx"].problems, "the scaled output must fail parity at opt"
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps(written.to_json()))
    traffic = json.loads(path.read_text())["models"]["m_onnx"]["traffic"]
    assert traffic["note"].startswith("4 clients x 4 requests (3 distinct, batch 1/2/3): 1 wrong;")
    assert SmokeReport.read(path) == written


def test_traffic_says_whether_requests_were_merged_or_batching_was_not_exercised() -> None:
    merged = Traffic(8, 64, 8, [1, 2, 3], rounds=1, executions=40, merged=True, merging_configured=True)
    assert merged.batching_note() == "requests of different clients merged (64 requests in 40 executions)"
    idle = Traffic(8, 64, 8, [1, 2, 3], rounds=3, executions=64, merging_configured=True)
    assert (
        idle.batching_note()
        == "dynamic batching was not exercised: 64 requests in 64 executions after 3 bursts"
    )
    assert Traffic(8, 64, 8, [1], rounds=1, executions=64).batching_note().startswith("no dynamic batching")
    wrong = Traffic(
        8, 64, 8, [1], rounds=1, executions=20, merged=True, merging_configured=True, mismatch_count=9
    )
    assert wrong.problems()[0] == (
        "9 of 64 answers to concurrent clients differ from the reference for the client's own request "
        "while the server merged requests of different clients"
    )
    assert merged.problems() == []


def test_a_smoke_report_without_models_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps({"schema": result.SCHEMA, "server": None}))
    with pytest.raises(SchemaMismatch, match=r"smoke\.json: not a smoke report"):
        SmokeReport.read(path)
