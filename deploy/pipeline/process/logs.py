"""Per-stage log files that also catch what native code prints.

ONNX export, onnxsim and ONNX Runtime write warnings from C++ straight to file
descriptors 1 and 2, bypassing `sys.stdout`; redirecting the descriptors while a stage
runs keeps the console clean and the log complete.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

# A stage's log: a model that prints without end (megabytes a call, golden calls it dozens
# of times) wrote 600 MB in one stage; past the cap the log keeps its start and what follows.
LOG_CAP = 256 << 20
KEEP = 8 << 20


def bound(log_path: Path) -> None:
    """Cuts a stage log that outgrew LOG_CAP to its first KEEP bytes and a line saying so;
    the stage goes on writing after it (its fds append: O_APPEND writes land at the end)."""
    try:
        size = log_path.stat().st_size
    except OSError:
        return
    if size <= LOG_CAP:
        return
    os.truncate(log_path, KEEP)
    with open(log_path, "a") as log:
        log.write(f"\n[deploy: {size - KEEP} bytes cut here: this stage's log passed {LOG_CAP >> 20} MiB]\n")


def console_stream() -> TextIO:
    """A handle on the real terminal that survives the descriptor redirection."""
    try:
        return PipeSafe(os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1))  # type: ignore[return-value]
    except (AttributeError, OSError, ValueError):
        return sys.stdout  # e.g. a test runner's in-memory stream


class PipeSafe:
    """A console stream whose reader may go away (`deploy run | head -1`, a closed `tee`):
    from then on its writes go to /dev/null and the command runs on to its own end and exit
    code, its summary, JUnit and report whole. A BrokenPipeError out of a progress line
    stopped the run as `interrupted`, every stage `not run`, exit 1 without a word."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_null()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_null()

    def _to_null(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)

    def __getattr__(self, name: str) -> object:  # isatty, fileno, encoding ...: the stream's
        return getattr(self._stream, name)


@contextmanager
def pipes_may_close() -> Iterator[None]:
    """sys.stdout and sys.stderr as PipeSafe for one command, put back after it."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PipeSafe(sys.stdout), PipeSafe(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


@contextmanager
def captured(log_path: Path) -> Iterator[logging.Logger]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"deploy.stage.{log_path.stem}")
    logger.handlers.clear()
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(log_path, mode="a")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    with _redirect_fds(log_path):
        try:
            yield logger
        finally:
            handler.close()
            logger.removeHandler(handler)


def _flush() -> None:
    """Python's streams, where it has them: a process started with fd 1 or 2 closed (the
    fork server's children of `deploy run >&-`) has None there."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


@contextmanager
def _redirect_fds(log_path: Path) -> Iterator[None]:
    _flush()
    saved = [os.dup(1), os.dup(2)]
    target = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        _flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)
