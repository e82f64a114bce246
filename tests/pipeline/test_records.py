"""Versioned records: a reader meeting another schema fails with the record's path and
both numbers, as a stage failure (no traceback), never a KeyError deep inside."""

from __future__ import annotations

import pytest

from deploy.pipeline.errors import StageFailed
from deploy.pipeline.records import SchemaMismatch, expect_schema


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
