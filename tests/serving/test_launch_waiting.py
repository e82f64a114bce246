"""Waiting for models (beyond the real server of tests/serving/test_launch.py): a model
still loading at the startup deadline is TIMEOUT with the state it was in; settled states
are kept as the server reported them; the default choice asks for the backends."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from deploy.serving.launch import _final, loadable_models, wait_models
from deploy.serving.model_state import UNKNOWN, LoadState, ModelState
from deploy.serving.repository import Model
from deploy.serving.tritonserver import Server


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (LoadState(ModelState.LOADING), "not ready before the startup timeout (state loading)"),
        (UNKNOWN, "not ready before the startup timeout (state unknown)"),
        (LoadState(ModelState.UNLOADING), "not ready before the startup timeout (state unloading)"),
    ],
)
def test_a_model_not_settled_at_the_deadline_timed_out(state: LoadState, reason: str) -> None:
    final = _final(state)
    assert final == LoadState(ModelState.TIMEOUT, reason) and not final.ready


@pytest.mark.parametrize(
    "state",
    [LoadState(ModelState.READY), LoadState(ModelState.UNAVAILABLE, "failed to load 'm': no backend")],
)
def test_settled_states_are_kept_as_reported(state: LoadState) -> None:
    assert _final(state) is state


def test_past_the_deadline_every_model_is_reported_without_asking(tmp_path: Path) -> None:
    nobody = Server("127.0.0.1:1", "127.0.0.1:1", tmp_path / "log", None, None)  # nothing listens on port 1
    states = wait_models(nobody, ["a", "b"], time.monotonic() - 1)
    assert list(states) == ["a", "b"] and {s.state for s in states.values()} == {ModelState.TIMEOUT}


def test_the_default_choice_keeps_the_models_whose_backend_the_server_has(tmp_path: Path) -> None:
    found = {
        "m_onnx": Model("onnx", "onnxruntime", "fp32", tmp_path),
        "m_python": Model("python", "python", "fp32", tmp_path),
    }
    asked: list[int] = []

    def backends() -> set[str]:
        asked.append(1)
        return {"python"}

    assert loadable_models(found, backends) == ["m_python"] and asked == [1]
    assert loadable_models(found, lambda: None) == ["m_onnx", "m_python"]  # unknown: try all
