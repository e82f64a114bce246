"""The consoles the CLI writes to. On a terminal, rich's own (its width, colours, live
displays). Elsewhere (a CI log, a pipe, a file) nothing is hard-wrapped: a message, a
path or a command to copy stays on one line, however long, and tables are as wide as
their content. Help text (typer's panels) gets a wide page rather than 80 columns."""

from __future__ import annotations

import os
import sys
from typing import IO, Literal, TextIO

from rich.console import Console

# Wide enough that no line we print is wrapped; tables only take the width they need.
UNWRAPPED = 100_000
# Typer's help panels fill the width they are given: a page, not a line.
HELP_WIDTH = "200"


def make_console(file: TextIO | None = None, stderr: bool = False) -> Console:
    probe = Console(file=file, stderr=stderr)
    if probe.is_terminal and _tty(probe.file):
        return probe
    # FORCE_COLOR (set by many CI systems) makes rich treat a pipe as a terminal: spinners,
    # cursor codes and 80-column tables in a log file. It asked for colours, and gets those.
    colours: Literal["standard"] | None = "standard" if probe.is_terminal else None
    return Console(
        file=file, stderr=stderr, width=UNWRAPPED, soft_wrap=True, force_terminal=False, color_system=colours
    )


def _tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: no terminal
        return False


def wide_help() -> None:
    """Before typer renders help: outside a terminal, a wide page (TERMINAL_WIDTH is what
    typer reads), unless the user chose a width."""
    if not sys.stdout.isatty() and "TERMINAL_WIDTH" not in os.environ and "COLUMNS" not in os.environ:
        os.environ["TERMINAL_WIDTH"] = HELP_WIDTH


def open_standard_streams() -> None:
    """A closed stdout or stderr (`deploy run ... >&-`, a supervisor's closed pipe): /dev/null
    in its place, so printing, and the stages' redirection of fds 1 and 2 into their logs,
    work; deploy crashed at start (sys.stdout is None) before anything ran."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)  # the lowest free fd: this one, where 0 is open
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "w", closefd=False))


def warnings_to_stderr() -> None:
    """The `deploy` logger's warnings (a command waiting for another's repository lock, a
    lock that cannot be made) on stderr: the package gives the logger only a NullHandler,
    which library users configure, so the CLI's commands said nothing while they waited."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    logging.getLogger("deploy").addHandler(handler)
