"""The `deploy` command's first code: Ctrl-C, SIGTERM or SIGHUP while Python is still
loading the command line (a tenth of a second) end it with one line and exit 130, as
they do once it runs, instead of a KeyboardInterrupt traceback or a silent exit 143.
Stdlib only, so that it is in place before anything else loads."""

from __future__ import annotations

import signal
import sys
from types import FrameType

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
INTERRUPTED = 130  # pipeline.errors.ExitCode.INTERRUPTED, not imported: it loads pydantic
_STOPS_SEEN: list[str] = []  # what stopped the start, should a library turn the stop into its own error


def main() -> None:
    # An ignored signal stays ignored (nohup, a background job).
    before = {sig: signal.signal(sig, _stop) for sig in STOPS if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        from deploy.cli import main as command
    except KeyboardInterrupt as stop:
        _interrupted(str(stop))
    except Exception:  # the stop, wrapped by what it landed in (3.11's __set_name__: a RuntimeError)
        if not _STOPS_SEEN:
            raise
        _interrupted(_STOPS_SEEN[-1])
    try:
        command()  # which puts its own handlers in place while it runs, then these back
    except KeyboardInterrupt:  # a stop after the command said its last word: its exit is the stop's
        sys.exit(INTERRUPTED)
    finally:  # from here on a stop ends the process as the signal does, without a traceback
        for sig in before:
            signal.signal(sig, signal.SIG_DFL)


def _interrupted(by: str) -> None:
    print(f"interrupted ({by}) while deploy started: nothing was done", file=sys.stderr)
    sys.exit(INTERRUPTED)


def _stop(signum: int, frame: FrameType | None) -> None:
    said = "Ctrl-C" if signum == signal.SIGINT else f"signal {signal.Signals(signum).name}"
    _STOPS_SEEN.append(said)
    raise KeyboardInterrupt(said)
