"""A call into the user's code outside a stage (`deploy init` building and calling the
model, `validate --probe`) made in a forked child: a segfault or abort in an extension,
or an `os._exit` in the model's code, then ends the child, and the command names it
instead of vanishing without a word. The answer and deploy's own errors come back."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from enum import Enum
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any, TypeVar

from deploy.domain.issues import Issue
from deploy.pipeline.errors import CallEnded as CallEnded
from deploy.pipeline.errors import ConfigError, DeployError, ExitCode
from deploy.pipeline.process import lifeline

T = TypeVar("T")


# How long the call may take: a forward that never returned kept `deploy init` waiting for ever.
DEFAULT_TIMEOUT_S = 900.0
TIMEOUT_ENV = "DEPLOY_CALL_TIMEOUT_S"


class Reply(str, Enum):
    RETURNED = "returned"
    RAISED = "raised"  # a DeployError, sent as it is
    INTERRUPTED = "interrupted"  # Ctrl-C reached the child first
    FAILED = "failed"  # anything else is deploy's bug: its traceback as text, exit 70
    HUNG = "hung"  # no answer within the timeout: the parent's own, never sent


def in_child(call: Callable[..., T], *args: Any) -> T:
    """call(*args) in a forked child; its result or DeployError; CallEnded naming how a
    child that never answered ended. A process running other threads (an embedding
    program, a test runner) calls it here instead: a fork copies only the forking thread,
    and a lock another one held stays held in the child for ever (seen: a test worker's
    child waiting on a futex)."""
    timeout_s = _timeout_s()  # refused alike wherever the call is made
    if _threads() > 1:
        with bounded(timeout_s):
            return call(*args)
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(writer, call, args), daemon=True)
    child.start()
    writer.close()
    try:
        kind, value = _receive(reader, timeout_s)
        child.join(timeout=0 if kind is Reply.HUNG else None)
    finally:
        if child.is_alive():  # the command itself was stopped (Ctrl-C): so is the call
            child.kill()
            child.join()
    return _outcome(kind, value, child.exitcode)


class _Overran(BaseException):
    """Raised in the main thread by bounded()'s alarm: a BaseException, so that the model's
    own `except Exception` does not swallow it."""


@contextlib.contextmanager
def bounded(timeout_s: float | None = None) -> Iterator[None]:
    """A call into the model's code in this very process (a live model, `deploy.optimize`;
    a process with threads, which a fork would copy with their locks held) bounded all the
    same: at the timeout an alarm raises in the main thread once Python runs again (a
    sleep or a Python loop; a native deadlock it cannot end), as CallEnded (exit 6). Off the
    main thread, or where the caller's own alarm is set, nothing is changed."""
    seconds = _timeout_s() if timeout_s is None else timeout_s
    mine = threading.current_thread() is threading.main_thread()
    if (
        not mine
        or signal.getitimer(signal.ITIMER_REAL)[0]
        or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None)
    ):
        yield
        return

    def overran(signum: int, frame: FrameType | None) -> None:
        raise _Overran

    before = signal.signal(signal.SIGALRM, overran)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Overran:
        raise _outcome_hung(seconds) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def _outcome_hung(seconds: float) -> CallEnded:
    return CallEnded(
        f"the model's code did not return within {seconds:g} s (a forward that hangs; for a slower "
        f"model set ${TIMEOUT_ENV})",
        ExitCode.LIMIT,
    )


def _threads() -> int:
    """This process's threads, native ones included (torch's and ONNX Runtime's pools hold
    locks too, which threading.active_count() does not see)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux: Python's own count is all there is
        return threading.active_count()


def _timeout_s() -> float:
    """$DEPLOY_CALL_TIMEOUT_S, or the default; a value that is no number of seconds above 0
    is refused naming it (ignored, it would have been a silent 900 s)."""
    given = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        seconds = float(given) if given else DEFAULT_TIMEOUT_S
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise ConfigError(
            f"${TIMEOUT_ENV}", [Issue(f"${TIMEOUT_ENV}", f"{given!r} is not a number of seconds above 0")]
        )
    return seconds


def _receive(reader: Connection, timeout_s: float) -> tuple[Reply | None, Any]:
    try:
        if not reader.poll(timeout_s):
            return Reply.HUNG, timeout_s  # the finally kills the child
        return reader.recv()  # type: ignore[no-any-return]
    except EOFError:  # the child ended without a reply
        return None, None


def _outcome(kind: Reply | None, value: Any, exitcode: int | None) -> Any:
    if kind is Reply.HUNG:
        raise _outcome_hung(value)
    if kind is Reply.RETURNED:
        return value
    if kind is Reply.RAISED:
        raise value
    if kind is Reply.INTERRUPTED:
        raise KeyboardInterrupt
    if kind is Reply.FAILED:
        raise RuntimeError(f"in the child process that ran the call:\n{value}")
    raise CallEnded(ended(exitcode))


def ended(exitcode: int | None) -> str:
    """How a child that never answered ended, in the words a model's author can act on."""
    if exitcode is not None and exitcode < 0 and -exitcode in signal.valid_signals():
        name = signal.Signals(-exitcode).name
        return f"the process running the model's code was killed by {name} (a native crash or abort in it, or a kill)"
    return f"the model's code ended the process (exit code {exitcode}) before it returned, as os._exit() does"


def _child(writer: Connection, call: Callable[..., Any], args: tuple[Any, ...]) -> None:
    lifeline.die_with_parent()
    try:
        reply: tuple[Reply, Any] = (Reply.RETURNED, call(*args))
    except DeployError as exc:
        reply = (Reply.RAISED, exc)
    except KeyboardInterrupt:
        reply = (Reply.INTERRUPTED, None)
    except BaseException as exc:  # sent as text: its class need not unpickle in the parent
        reply = (Reply.FAILED, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    try:
        writer.send(reply)
    except Exception as exc:  # an answer that does not pickle is deploy's bug: say so
        writer.send((Reply.FAILED, f"its answer could not be sent back: {type(exc).__name__}: {exc}"))
    writer.close()
    os._exit(0)  # no atexit handlers or finalizers of the parent's copy run twice
