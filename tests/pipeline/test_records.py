"""Versioned records: a reader meeting another schema fails with the record's path and
both numbers, as a stage failure (no traceback), never a KeyError deep inside."""

from __future__ import annotations

import pytest

from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.records import SchemaMismatch, expect_schema


def test_the_expected_schema_passes_the_data_through() -> None:
    data = {"schema": 3, "x": 1}
    assert expect_schema(data, "a.json", 3) is data


@pytest.mark.parametrize(
    ("data", "says"), [({"schema": 1}, "schema 1"), ({}, "schema None"), ([1], "not a JSON object")]
)
def test_another_schema_names_the_record_and_both_numbers(data: object, says: str) -> None:
    with pytest.raises(SchemaMismatch) as info:
        expect_schema(data, "runs/x/bench.json", 2)
    assert isinstance(info.value, StageFailed)
    assert "runs/x/bench.json" in str(info.value) and says in str(info.value)
    if isinstance(data, dict):
        assert "reads schema 2" in str(info.value) and "--force" in str(info.value)


def test_a_record_reads_back_typed_with_its_nested_records_and_enums(tmp_path) -> None:
    import json

    from deploy.runtimes.selection_record import Chosen, Judged, Selection, Verdict

    judged = Judged("onnxruntime", "onnx", "fp32", Verdict.SELECTED, 1.5, "")
    written = Selection(
        [Chosen("latency", "latency", 1, "onnxruntime", [judged])], {"onnxruntime_int8": 0.99}
    )
    path = tmp_path / "selection.json"
    path.write_text(json.dumps(written.to_json()))
    back = Selection.read(path)
    assert back == written and back.objectives[0].candidates[0].verdict is Verdict.SELECTED


def test_a_wrong_field_is_named_not_a_key_error(tmp_path) -> None:
    import json

    from deploy.gates.batch_independence import SCHEMA, BatchIndependence

    path = tmp_path / "batching.json"
    path.write_text(json.dumps({"schema": SCHEMA, "batch": "four", "outputs": [], "reason": ""}))
    with pytest.raises(SchemaMismatch, match=r"batching.json: not a batching record \(batch: .*integer"):
        BatchIndependence.read(path)
    path.write_text(json.dumps({"schema": SCHEMA, "batch": 4, "outputs": [{"name": "y"}], "reason": ""}))
    with pytest.raises(SchemaMismatch, match=r"outputs\.0\.\w+: Field required"):
        BatchIndependence.read(path)
    path.write_bytes(b"\xff{")
    with pytest.raises(SchemaMismatch, match="not a batching record"):
        BatchIndependence.read(path)
