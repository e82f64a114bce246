"""The measuring stages' params become the harness's Settings field for field, with the
same defaults, and refuse what the harness would refuse."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from deploy.runtimes.harness import Settings
from deploy.runtimes.measure import MeasureSettings


def test_the_defaults_are_the_harnesss() -> None:
    assert MeasureSettings().settings() == Settings()


def test_every_field_reaches_the_harness() -> None:
    params = MeasureSettings(
        warmup_ms=5,
        duration_s=0.5,
        iterations=7,
        percentiles=(50, 99.9),
        stability_windows=2,
        stability_threshold=0.2,
        max_windows=4,
    )
    settings = params.settings()
    assert {f.name for f in dataclasses.fields(Settings)} == set(MeasureSettings.model_fields)
    assert dataclasses.asdict(settings) == params.model_dump()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"stability_windows": 4, "max_windows": 3}, r"max_windows \(3\) must be >= stability_windows \(4\)"),
        ({"percentiles": ()}, "at least 1 item"),
        ({"percentiles": (101,)}, "less than or equal to 100"),
        ({"stability_threshold": 1.0}, "less than 1"),
        ({"iterations": 0}, "greater than or equal to 1"),
    ],
)
def test_settings_the_harness_cannot_use_are_refused(bad: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        MeasureSettings(**bad)
