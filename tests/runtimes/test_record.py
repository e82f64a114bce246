"""bench.json as a record: rows measured by the real harness survive the trip through
JSON field for field, and a file of another layout is refused with its path."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from deploy.pipeline.graph.records import SchemaMismatch
from deploy.runtimes import harness
from deploy.runtimes.record import BenchResults, BenchRow, ServerShare


def measured_row() -> BenchRow:
    settings = harness.Settings(
        warmup_ms=10, duration_s=0.05, iterations=5, percentiles=(50.0, 99.0), max_windows=3
    )
    timing = harness.measure(lambda: time.sleep(0.001), settings)
    return BenchRow.of(harness.summarize(timing, 2, settings), "onnxruntime", "cpu")


def test_bench_results_round_trip(tmp_path: Path) -> None:
    row = measured_row()
    served = replace(
        row,
        runtime="triton",
        model="m",
        device="server",
        concurrency=4,
        server=ServerShare(1, 2, 3, 4, 5, 6, 7, 1.2, 9),
    )
    results = BenchResults([row, served], {"tensorrt": "no engine"}, {"host_cores": 2}, {"batches": [2]})
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(results.to_json()))
    back = BenchResults.read(path)
    assert back == results
    assert back.rows[1].cell_key == "triton:m@2/c4" and back.rows[0].windows == row.windows


def test_a_file_without_the_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    data = BenchResults([measured_row()]).to_json()
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "schema"}))
    with pytest.raises(SchemaMismatch, match=r"bench\.json: schema None"):
        BenchResults.read(path)


def test_a_row_of_another_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    data = BenchResults([measured_row()]).to_json()
    data["results"][0]["latency_ms"] = data["results"][0].pop("median_ms")  # type: ignore[index]
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaMismatch, match="not a bench results record"):
        BenchResults.read(path)
