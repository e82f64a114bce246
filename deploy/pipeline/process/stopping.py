"""How a run stops: SIGTERM (a CI job's abort, `kill`) and SIGHUP (a closed terminal or
ssh session) end it as Ctrl-C does, a KeyboardInterrupt in the main thread; the stage
running then is recorded as `interrupted`, and the summary, JUnit and report are written.

A stop that lands while a stage's child is being started would leave a child nobody
knows to stop (its pid not yet read back from the fork server): `deferred()` holds the
stop until the start is done, then raises it."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from deploy.pipeline.report.results import StageResult

# What signal.signal takes and returns: a handler, SIG_DFL / SIG_IGN, or None (not set from Python).
Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None
# The handlers a run replaced, by signal, to put back (None: not on the main thread).
SignalHandler = dict[signal.Signals, Handler] | None


# Ctrl-C, a CI job's abort or `kill` (SIGTERM), a closed terminal or ssh session (SIGHUP).
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _State:
    deferring = 0  # depth of deferred() blocks
    pending: str | None = None  # the signal that arrived meanwhile


def stop_on_signals() -> SignalHandler:
    """Ctrl-C, SIGTERM and SIGHUP raise KeyboardInterrupt: the stage's child is stopped,
    the summary, JUnit and report say `interrupted`. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return None
    # An ignored signal stays ignored: `nohup deploy run` (SIGHUP), a background job (SIGINT).
    caught = [sig for sig in STOPPING if signal.getsignal(sig) is not signal.SIG_IGN]
    return {sig: signal.signal(sig, _raise_interrupt) for sig in caught}


class Stopped(Exception):
    """The run was stopped during a stage: carries that stage's `interrupted` result."""

    def __init__(self, result: StageResult) -> None:
        super().__init__(result.message)
        self.result = result


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    name = "Ctrl-C" if signum == signal.SIGINT else f"signal {signal.Signals(signum).name}"
    if _State.deferring:
        _State.pending = name
        return
    raise KeyboardInterrupt(name)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A stop arriving inside the block is raised when the block ends, not inside it."""
    _State.deferring += 1
    try:
        yield
    finally:
        _State.deferring -= 1
        if not _State.deferring and _State.pending is not None:
            name, _State.pending = _State.pending, None
            raise KeyboardInterrupt(name)


def restore(previous: SignalHandler) -> None:
    for sig, handler in (previous or {}).items():
        signal.signal(sig, handler)
