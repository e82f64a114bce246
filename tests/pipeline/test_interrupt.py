"""Ctrl-C in the middle of a stage: exit 130, nothing half-written in the cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from deploy.pipeline.errors import ExitCode

SLOW_FACTORY = """
import sys, time
sys.path.insert(0, {models!r})
from tiny_cnn import tiny_cnn


def slow(**kwargs):
    time.sleep(2)  # a window in which the interrupt lands inside the stage
    return tiny_cnn(**kwargs)
"""


def test_sigint_during_a_stage_leaves_the_cache_clean(write_config, tmp_path):
    from tests.helpers import ROOT, signals_as_a_terminal_sends_them

    model = tmp_path / "slow.py"
    model.write_text(SLOW_FACTORY.format(models=str(ROOT / "configs" / "models")))
    path = write_config({"model": {"file": str(model), "callable": "slow"}})
    log = path.parent / "runs" / "tiny" / "logs" / "export.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "run", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=signals_as_a_terminal_sends_them,
    )
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.exists(), "export never started"
    time.sleep(0.5)  # inside the model's factory
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, err.decode()[-3000:]
    cache = path.parent / "cache"
    entries = [json.loads(p.read_text())["stage"] for p in cache.glob("actions/*/*.json")]
    assert entries == ["golden"]  # the stage before it, whole; nothing of the interrupted one
    assert not list(cache.glob("tmp/*"))


def test_an_interrupt_a_library_wrapped_is_still_an_interrupt():
    import pytest

    from deploy.pipeline.process.execute import _reraise_interrupt

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as inner:
            raise RuntimeError("the tracer's own error") from inner
    except RuntimeError as wrapped:
        with pytest.raises(KeyboardInterrupt):
            _reraise_interrupt(wrapped)
    _reraise_interrupt(ValueError("a plain error stays a stage failure"))


def test_a_stop_just_after_a_stage_ended_keeps_that_stage_as_it_ended(write_config, tmp_path):
    """A Ctrl-C landing as `golden ran` was printed (its outputs stored) recorded golden as
    `interrupted`, while `deploy plan` then showed it cached: the run stops there, the stage
    is what it was."""
    from deploy.pipeline.process.faults import FAULT_ENV
    from tests.helpers import signals_as_a_terminal_sends_them

    path = write_config()
    done = subprocess.run(
        [sys.executable, "-m", "deploy", "run", str(path), "--json", "s.json"],
        cwd=tmp_path,
        env={**os.environ, FAULT_ENV: "SIGINT@reported:golden"},
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=signals_as_a_terminal_sends_them,
    )
    assert done.returncode == ExitCode.INTERRUPTED, done.stdout + done.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    rows = {s["stage"]: s["status"] for s in summary["stages"]}
    assert summary["status"] == "interrupted" and rows["golden"] == "ran", rows
    assert {s for stage, s in rows.items() if stage != "golden"} == {"not run"}
