"""Ctrl-C in the middle of a stage: exit 130, nothing half-written in the cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from pipeline.errors import ExitCode


def test_sigint_during_a_stage_leaves_the_cache_clean(write_config):
    path = write_config()
    log = path.parent / "runs" / "tiny" / "logs" / "trace.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "run", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    # Wait until the stage is well inside torch (its first log line comes after the
    # eager reference run), so the interrupt lands mid-stage.
    while (
        "reference outputs" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    assert log.exists(), "trace never started"
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, err.decode()[-3000:]
    cache = path.parent / "cache"
    assert not list(cache.glob("actions/*/*.json"))
    assert not list(cache.glob("tmp/*"))


def test_an_interrupt_a_library_wrapped_is_still_an_interrupt():
    import pytest

    from pipeline.runner import _reraise_interrupt

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as inner:
            raise RuntimeError("the tracer's own error") from inner
    except RuntimeError as wrapped:
        with pytest.raises(KeyboardInterrupt):
            _reraise_interrupt(wrapped)
    _reraise_interrupt(ValueError("a plain error stays a stage failure"))
