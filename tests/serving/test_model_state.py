"""Triton's repository index entries as typed load states."""

from __future__ import annotations

import pytest

from deploy.serving.model_state import LoadState, ModelState


@pytest.mark.parametrize(
    ("entry", "state", "ready", "settled"),
    [
        ({"name": "m", "state": "READY"}, ModelState.READY, True, True),
        ({"name": "m", "state": "UNAVAILABLE", "reason": "no backend"}, ModelState.UNAVAILABLE, False, True),
        ({"name": "m", "state": "LOADING"}, ModelState.LOADING, False, False),
        ({"name": "m"}, ModelState.UNKNOWN, False, False),  # listed, never loaded
        ({"name": "m", "state": "SOMETHING_NEW"}, ModelState.UNKNOWN, False, False),
    ],
)
def test_index_entries_parse_into_states(entry: dict, state: ModelState, ready: bool, settled: bool) -> None:
    found = LoadState.from_index(entry)
    assert (found.state, found.ready, found.settled) == (state, ready, settled)


def test_the_reason_travels_and_prints_after_the_state() -> None:
    found = LoadState.from_index({"state": "UNAVAILABLE", "reason": "failed to load 'm': no backend"})
    assert str(found) == "UNAVAILABLE failed to load 'm': no backend"
    assert str(LoadState.from_index({"state": "READY"})) == "READY"
