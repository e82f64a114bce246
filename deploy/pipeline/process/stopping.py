"""How a run stops: SIGTERM (a CI job's abort, `kill`) and SIGHUP (a closed terminal or
ssh session) end it as Ctrl-C does, a KeyboardInterrupt in the main thread; the stage
running then is recorded as `interrupted`, and the summary, JUnit and report are written.

A stop that lands while a stage's child is being started would leave a child nobody
knows to stop (its pid not yet read back from the fork server): `deferred()` holds the
stop until the start is done, then raises it."""

from __future__ import annotations

import _thread
import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from deploy.pipeline.process.held import HeldSignal

if TYPE_CHECKING:  # stdlib only at import: the CLI installs these handlers before anything loads
    from deploy.pipeline.report.results import StageResult

# What signal.signal takes and returns: a handler, SIG_DFL / SIG_IGN, or None (not set from Python).
Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None
# The handlers a run replaced, by signal, to put back (None: not on the main thread).
SignalHandler = dict[signal.Signals, Handler] | None


# Ctrl-C, a CI job's abort or `kill` (SIGTERM), a closed terminal or ssh session (SIGHUP).
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


AGAIN_S = 0.01  # a stop dropped by a finalizer is raised again after this


class _State:
    last: str | None = None  # the last stop that arrived in this command (listening)
    signum = signal.SIGINT  # and its signal
    again = False  # a stop a finalizer dropped is to be raised again (_raised_again)
    late: str | None = None  # a stop after the run's records were written (absorb)


def _raise(name: str) -> None:
    raise KeyboardInterrupt(name)


_HELD: HeldSignal[str] = HeldSignal(_raise)  # deferred(): a stop held until its block ends


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
    _State.last, _State.signum, _State.again = name, signal.Signals(signum), False
    if not _HELD.hold(name):
        raise KeyboardInterrupt(name)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A stop arriving inside the block is raised when the block ends, not inside it."""
    with _HELD.block():
        yield


@contextlib.contextmanager
def listening() -> Iterator[None]:
    """stop_on_signals for one command, put back after it. A library may turn the
    KeyboardInterrupt into an error of its own (pydantic building a schema raises a
    SchemaError): `stopped_by()` then says that a stop came first."""
    _State.last = _State.late = None
    previous, hook = stop_on_signals(), sys.unraisablehook
    sys.unraisablehook = functools.partial(_raised_again, hook)
    try:
        yield
    finally:
        sys.unraisablehook, _State.again = hook, False  # the command ended: nothing left to raise
        restore(previous)


def _raised_again(hook: Callable[[Any], object], unraisable: Any) -> None:
    """A stop raised where Python cannot pass it on (a finalizer, a C callback) was printed
    as "Exception ignored" and dropped, and the command ran on to exit 0: it is raised
    again a moment later, from another thread (raised from here, it would be dropped too),
    as the same signal; where it lands in such a place again, again."""
    if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
        _State.again = True
        again = threading.Timer(AGAIN_S, _again)
        again.daemon = True  # a command ending meanwhile does not wait for it
        again.start()
        return
    hook(unraisable)


def _again() -> None:
    if _State.again:  # not raised meanwhile, and the command still runs
        _thread.interrupt_main(_State.signum)


def stopped_by() -> str | None:
    """The stop that arrived during the command (`listening`), if one did and the command
    has not said what it left (`said`)."""
    return _State.last


def said() -> None:
    """The command has said what the stop left: the CLI adds no line of its own."""
    _State.last = None


def absorb(arrived: str | None = None) -> None:
    """The run's records are written: a stop from here on changes nothing they say, so it
    is noted (`late`) and the command ends as they do, not `interrupted` with exit 130 after
    a summary that says ok. One held by deferred() is dropped too. Main thread only."""
    _State.late = arrived or _State.late  # `arrived`: one already raised, caught by the caller
    if threading.current_thread() is not threading.main_thread():
        return
    _HELD.pending = None
    for sig in STOPPING:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _noted)


def late() -> str | None:
    """The stop that arrived after the records were written (absorb), if one did."""
    return _State.late


def _noted(signum: int, frame: FrameType | None) -> None:
    _State.late = "Ctrl-C" if signum == signal.SIGINT else f"signal {signal.Signals(signum).name}"


def restore(previous: SignalHandler) -> None:
    for sig, handler in (previous or {}).items():
        signal.signal(sig, handler)
