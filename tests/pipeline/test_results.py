"""The run summary as a record: a real run's summary.json reads back into the same
record, and a summary of another layout is refused (then `deploy plan` knows no last
failures instead of crashing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deploy.pipeline.graph.plan import last_failures
from deploy.pipeline.report.results import (
    SUMMARY_SCHEMA,
    OutputSummary,
    RunStatus,
    RunSummary,
    StageSummary,
    Status,
    SummarySchemaError,
)
from deploy.pipeline.store.provenance import Provenance
from tests.helpers import run


def test_a_runs_summary_reads_back_as_written(write_config) -> None:
    path = write_config(replace={"stages": {"trace": {}, "export": {}}})
    run(path)
    written = Path(path).parent / "runs" / "tiny" / "summary.json"
    summary = RunSummary.read(written)
    assert summary.to_json() == json.loads(written.read_text())
    assert summary.status is RunStatus.OK and {s.status for s in summary.stages} == {Status.RAN}
    assert summary.provenance is not None and summary.provenance.python
    assert all(o.digest and Path(o.path).exists() for s in summary.stages for o in s.outputs.values())


def test_another_schema_is_refused_and_plan_treats_it_as_unknown(tmp_path: Path) -> None:
    old = tmp_path / "summary.json"
    old.write_text(
        json.dumps({"pipeline": "p", "status": "failed", "stages": [{"stage": "x", "status": "failed"}]})
    )
    with pytest.raises(ValueError, match="run summary schema None"):
        RunSummary.read(old)
    assert last_failures(old) == {}


def _summary() -> RunSummary:
    table = {
        "title": "parity",
        "columns": ["runtime", "max"],
        "rows": [["ort", 1e-7]],
        "note": "",
        "console": False,
    }
    ran = StageSummary(
        "export",
        Status.RAN,
        key="a" * 64,
        seconds=0.5,
        reasons=["never ran with this cache"],
        outputs={"onnx": OutputSummary("tree", "b" * 64, 123, "/cache/trees/" + "b" * 64)},
        metrics={"headline": "opset 17", "nodes": 8, "report": [table]},
        log="/runs/tiny/logs/export.log",
    )
    cached = StageSummary(
        "trace", Status.CACHED, key="c" * 64, seconds=1.25, created="2026-01-01T00:00:00+00:00"
    )
    failed = StageSummary("validate", Status.FAILED, key="d" * 64, message="parity\nmax 3.0", log="/x.log")
    provenance = Provenance("host", "cpu", 2, "3.11.9", {"torch": "2.5.0", "tensorrt": None}, None)
    rows = [ran, cached, failed, StageSummary("smoke", Status.NOT_RUN)]
    return RunSummary(
        "tiny",
        "configs/tiny.yaml",
        RunStatus.FAILED,
        rows,
        "2026-01-02T00:00:00+00:00",
        3.5,
        "/cache",
        provenance=provenance,
    )


def test_the_records_round_trip_through_json() -> None:
    summary = _summary()
    assert RunSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary
    assert [s.stage for s in summary.failed()] == ["validate"]
    rejected = RunSummary(
        "tiny",
        "tiny.yaml",
        RunStatus.CONFIG_ERROR,
        [StageSummary("config", Status.FAILED, message="bad")],
        message="bad",
    )
    assert RunSummary.from_json(json.loads(json.dumps(rejected.to_json()))) == rejected


def test_the_summary_layout_is_pinned() -> None:
    """What CI jobs and scripts read from summary.json / --json: the layout it had before
    it was a record, plus `schema` first."""
    data = _summary().to_json()
    assert list(data) == [
        "schema",
        "pipeline",
        "config",
        "status",
        "message",
        "finished",
        "wall_s",
        "cache",
        "provenance",
        "publishing",
        "stages",
    ]
    assert data["schema"] == SUMMARY_SCHEMA and data["status"] == "failed"
    assert data["provenance"] == {
        "host": "host",
        "cpu": "cpu",
        "cores": 2,
        "python": "3.11.9",
        "libraries": {"torch": "2.5.0", "tensorrt": None},
        "commit": None,
    }
    row = data["stages"][0]
    assert list(row) == [
        "stage",
        "status",
        "key",
        "seconds",
        "reasons",
        "message",
        "partial",
        "created",
        "remote",
        "log",
        "outputs",
        "metrics",
    ]
    assert row["status"] == "ran"
    assert row["outputs"] == {
        "onnx": {"kind": "tree", "digest": "b" * 64, "bytes": 123, "path": "/cache/trees/" + "b" * 64}
    }
    assert [s["status"] for s in data["stages"]] == ["ran", "cached", "failed", "not run"]


@pytest.mark.parametrize("schema", [None, 0, SUMMARY_SCHEMA + 1, "1"])
def test_another_schema_names_the_file_and_both_numbers(tmp_path: Path, schema) -> None:
    path = tmp_path / "summary.json"
    data = _summary().to_json()
    if schema is None:
        del data["schema"]
    else:
        data["schema"] = schema
    path.write_text(json.dumps(data))
    with pytest.raises(SummarySchemaError) as raised:
        RunSummary.read(path)
    assert str(raised.value) == (
        f"{path}: run summary schema {schema!r}, this deploy reads schema {SUMMARY_SCHEMA} "
        "(written by another deploy release)"
    )
    assert raised.value.found == schema and isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "run summary schema None"),
        (json.dumps({"schema": SUMMARY_SCHEMA, "pipeline": "p"}), "not a run summary (KeyError"),
        (
            json.dumps(
                {"schema": SUMMARY_SCHEMA, "pipeline": "p", "config": "c", "status": "bogus", "stages": []}
            ),
            "not a run summary (ValueError",
        ),
        (
            json.dumps(
                {
                    "schema": SUMMARY_SCHEMA,
                    "pipeline": "p",
                    "config": "c",
                    "status": "ok",
                    "stages": [{"stage": "x", "status": "ran", "surprise": 1}],
                }
            ),
            "not a run summary (TypeError",
        ),
    ],
)
def test_a_damaged_summary_is_a_value_error_naming_the_file(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "summary.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(expected)) as raised:
        RunSummary.read(path)
    assert str(raised.value).startswith(f"{path}: ")


def test_plan_reads_last_failures_and_warns_on_an_unreadable_summary(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    warnings: list[str] = []
    assert last_failures(path, warnings.append) == {} and warnings == []  # no run yet: nothing to say
    path.write_text(json.dumps(_summary().to_json()))
    found = last_failures(path, warnings.append)
    assert list(found) == ["validate"] and warnings == []
    assert found["validate"].reason("d" * 64) == (
        "failed in the last run (2026-01-02T00:00:00+00:00) with this same key: parity"
    )
    path.write_text(json.dumps({**_summary().to_json(), "schema": SUMMARY_SCHEMA + 1}))
    assert last_failures(path, warnings.append) == {}
    assert len(warnings) == 1 and f"{path}: run summary schema {SUMMARY_SCHEMA + 1}" in warnings[0]
