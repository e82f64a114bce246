"""A stage's log is bounded (deploy/pipeline/process/logs.bound): a model that prints
without end wrote 600 MB into one stage's log."""

from __future__ import annotations

import os
from pathlib import Path

from deploy.pipeline.process import logs


def test_a_log_past_the_cap_keeps_its_start_says_the_cut_and_takes_what_follows(tmp_path: Path) -> None:
    log = tmp_path / "golden.log"
    log.write_bytes(b"the stage's first lines\n")
    writer = os.open(log, os.O_WRONLY | os.O_APPEND)  # as the stage's fds 1 and 2 are
    try:
        os.truncate(log, logs.LOG_CAP + (1 << 20))  # past the cap (sparse: no disk used)
        logs.bound(log)
        os.write(writer, b"printed after the cut\n")
    finally:
        os.close(writer)
    text = log.read_bytes()
    assert text.startswith(b"the stage's first lines\n")
    cut = text.index(b"[deploy: ")
    assert cut >= logs.KEEP and b"bytes cut here: this stage's log passed 256 MiB]" in text
    assert text.endswith(b"printed after the cut\n") and len(text) < logs.KEEP + 4096


def test_a_log_under_the_cap_is_left_alone(tmp_path: Path) -> None:
    log = tmp_path / "export.log"
    log.write_bytes(b"x" * 1000)
    logs.bound(log)
    logs.bound(tmp_path / "missing.log")  # a stage that has not opened its log yet
    assert log.read_bytes() == b"x" * 1000
