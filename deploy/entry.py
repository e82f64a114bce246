"""The `deploy` command's first code and its last: Ctrl-C, SIGTERM or SIGHUP while Python
is still loading the command line (a tenth of a second) end it with one line and exit 130,
as they do once it runs, instead of a KeyboardInterrupt traceback or a silent exit 143;
one after the command has ended ends the process at once with the command's own exit
status. Stdlib only until the command has loaded, so that it is in place before anything else."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import sys
from types import FrameType

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
INTERRUPTED = 130  # pipeline.errors.ExitCode.INTERRUPTED, not imported: it loads pydantic
_STOPS_SEEN: list[str] = []  # what stopped the start, should a library turn the stop into its own error


def main() -> None:
    # An ignored signal stays ignored (nohup, a background job).
    before = {sig: signal.signal(sig, _stop) for sig in STOPS if signal.getsignal(sig) is not signal.SIG_IGN}
    # Registered first, so it runs last: Python's finalization puts SIG_DFL back in place of
    # its handlers (a stop then killed the process, 143, tens of ms after `run ok`), but not
    # in place of SIG_IGN.
    atexit.register(_ignored, list(before))
    try:
        from deploy.cli import main as command
    except KeyboardInterrupt as stop:
        _interrupted(str(stop))
    except Exception:  # the stop, wrapped by what it landed in (3.11's __set_name__: a RuntimeError)
        if not _STOPS_SEEN:
            raise
        _interrupted(_STOPS_SEEN[-1])
    code: int | str | None = 0
    try:
        command()  # which puts its own handlers in place while it runs, then these back
    except KeyboardInterrupt:  # a stop after the command's own handling, before its last word
        code = INTERRUPTED
    except SystemExit as done:
        code = done.code
    # The command has ended and said so; what is left is the interpreter's exit (the fork
    # server and resource tracker waited for, ~0.7 s). A stop now ends it at once, with the
    # command's own exit status: not as the signal does (143 after a summary saying ok).
    for sig in before:
        signal.signal(sig, functools.partial(_exit_now, _status(code)))
    from deploy.pipeline.process import faults  # loaded by the command already

    faults.point("exited")  # the tests' stop at this moment
    sys.exit(code)


def _ignored(stops: list[signal.Signals]) -> None:
    for sig in stops:
        signal.signal(sig, signal.SIG_IGN)


def _status(code: int | str | None) -> int:
    """What sys.exit(code) exits with: None is 0, a message 1."""
    return code if isinstance(code, int) else (0 if code is None else 1)


def _exit_now(status: int, signum: int, frame: FrameType | None) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(status)


def _interrupted(by: str) -> None:
    print(f"interrupted ({by}) while deploy started: nothing was done", file=sys.stderr)
    sys.exit(INTERRUPTED)


def _stop(signum: int, frame: FrameType | None) -> None:
    said = "Ctrl-C" if signum == signal.SIGINT else f"signal {signal.Signals(signum).name}"
    _STOPS_SEEN.append(said)
    raise KeyboardInterrupt(said)
