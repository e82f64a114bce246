"""The run summary as a record: a real run's summary.json reads back into the same
record, and a summary of another layout is refused (then `deploy plan` knows no last
failures instead of crashing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.plan import last_failures
from pipeline.results import RunStatus, RunSummary, Status
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
