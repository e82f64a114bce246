"""Error taxonomy: every failure the user can cause or meet maps to one exit code.

Bugs in `deploy` itself are deliberately *not* `DeployError`s, so the CLI can tell
"your input is wrong" from "we are wrong" (the latter exits INTERNAL, with a traceback).
"""

from __future__ import annotations

import re
from enum import IntEnum
from pathlib import Path
from typing import Any

from deploy.domain.issues import Issue


class ExitCode(IntEnum):
    OK = 0
    STAGE = 1  # a stage ran and failed (gate, conversion, ...)
    USAGE = 2  # bad command line (typer/click's own code)
    CONFIG = 3  # the YAML, a file it names, or the stage selection is wrong
    ENVIRONMENT = 4  # a library, tool or device the run needs is missing
    CRASHED = 5  # a stage's process died: a signal (segfault, abort, the OOM killer) or exit without a result
    LIMIT = 6  # a stage exceeded its timeout_s or memory_mb and was stopped
    REGRESSION = 7  # the release gate refused a model: it disagrees with, or is slower than, what is deployed
    CONTENDED = 8  # a timing a verdict needed was taken on a busy machine: no verdict, rerun quiet
    WILL_RUN = 10  # `deploy plan --detailed-exitcode`: some stage will (or may) run
    INTERNAL = 70  # a bug in deploy (EX_SOFTWARE)
    INTERRUPTED = 130


class DeployError(Exception):
    exit_code = ExitCode.INTERNAL

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other arguments than their message; a child's error (child_call)
        # crosses the pipe as its class, args and fields.
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[DeployError], args: tuple[Any, ...], fields: dict[str, Any]) -> DeployError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(fields)
    return error


class ConfigError(DeployError):
    exit_code = ExitCode.CONFIG

    def __init__(self, source: str, issues: list[Issue]) -> None:
        self.source = source
        self.issues = issues
        lines = "\n".join(f"  {issue}" for issue in issues)
        super().__init__(f"{source}: {len(issues)} error(s)\n{lines}")


class UsageError(ConfigError):
    """A command-line flag's value is malformed or names nothing there is: exit 2, as
    click's own usage errors, wherever the flag is parsed."""

    exit_code = ExitCode.USAGE


class SelectionError(DeployError):
    """A stage outside --from/--to/--only has no cached result to read from."""

    exit_code = ExitCode.CONFIG


class EnvError(DeployError):
    exit_code = ExitCode.ENVIRONMENT


# ENOSPC, EDQUOT: the disk (or the user's quota) is full; EFBIG: the file size limit
# (`ulimit -f`, a CI agent's) is reached, which no write past it gets round either.
FULL = frozenset({28, 122, 27})
FILE_TOO_LARGE = 27


class DiskFull(EnvError, OSError):
    """A write found no room: names the path; the run's files go where there is room. Still
    an OSError, so code that tolerates a failed write (a memo, a footprint) still does."""

    def __init__(self, path: object, errno: int = 28) -> None:
        self.path = path
        if errno == FILE_TOO_LARGE:
            said = f"the file size limit (ulimit -f) stops {path}: raise it, then rerun"
        else:
            said = f"no space left on the device for {path}: free space there, then rerun"
        super().__init__(said)
        self.errno = errno


def disk_full(exc: BaseException) -> DiskFull | None:
    """`exc` (or what caused it) as a DiskFull, when it is one; else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DiskFull):
            return seen
        if isinstance(seen, OSError) and seen.errno in FULL:
            return DiskFull(
                seen.filename2 or seen.filename or "a file", seen.errno
            )  # a copy's target is filename2
        seen = seen.__cause__ or seen.__context__
    return None


class RegressionRefused(DeployError):
    """The release gate refused: nothing was published (`--accept-regression REASON` overrides)."""

    exit_code = ExitCode.REGRESSION


class Contended(DeployError):
    """A verdict (a regression gate, the release comparison) would rest on a timing taken
    while other processes held the cores, or the machine never became quiet: none is
    given. Not a failure of the model: the same run on a quiet machine decides."""

    exit_code = ExitCode.CONTENDED


class StageError(DeployError):
    """A stage failed; carries where its log is and how to resume."""

    exit_code = ExitCode.STAGE

    def __init__(
        self, stage: str, message: str, log: Path | None, resume: str, exit_code: ExitCode = ExitCode.STAGE
    ) -> None:
        self.stage = stage
        self.log = log
        self.resume = resume
        self.exit_code = exit_code  # the cause's: a missing library inside a stage stays 4
        where = f"\n  log: {log}" if log is not None else ""
        super().__init__(f"stage '{stage}' failed: {message}{where}\n  resume: {resume}")


class StageFailed(DeployError):
    """An expected failure of the work itself (a gate, a tool's error message), raised by
    stage code and by the libraries the commands share (`deploy serve`, `deploy bench`).

    In a run, the runner turns it into a StageError without a traceback on the console;
    outside one, the CLI prints it and exits STAGE.
    """

    exit_code = ExitCode.STAGE


class CallEnded(StageFailed):
    """A call into the model's code outside a stage (`deploy init`, `validate --probe`,
    `deploy.optimize`) that ended before it answered: a native crash, a kill or an os._exit
    (exit 5, as a stage's process that dies), or no answer in time (exit 6, as a stage
    stopped at its timeout_s)."""

    def __init__(self, message: str, exit_code: ExitCode = ExitCode.CRASHED) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def said_while(self, doing: str) -> CallEnded:
        """The same end, naming the model as the one whose code ended it and what ran it."""
        return CallEnded(f"model: {self}, while {doing}", self.exit_code)


class StageSkipped(Exception):
    """Raised by stage code when it cannot apply here (e.g. no GPU); not a failure."""


class MissingDependency(EnvError):
    def __init__(self, what: str, install: str) -> None:
        self.what, self.install = what, install
        super().__init__(f"{what} is not available; install it with: {install}")


# Terminal colour / cursor sequences: libraries (torch.onnx's exporter) put them in their
# messages; in a log file or a Jenkins console they are noise.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def plain(text: str) -> str:
    return _ANSI.sub("", text)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, plain; its type's name if it has none."""
    lines = plain(str(exc)).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def innermost(exc: BaseException) -> BaseException:
    """The error that started it, not the wrappers around it."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


# An upstream message's line, at most: torch.export's guards run to kilobytes of symbols.
LINE_CHARS = 160


def clip(text: str, limit: int = LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def root_cause(exc: BaseException) -> str:
    """`Type: first line` of the innermost cause, clipped: the error that started it, not
    the wrappers' advice around it."""
    exc = innermost(exc)
    lines = plain(str(exc)).strip().splitlines()
    return clip(f"{type(exc).__name__}: {lines[0]}") if lines else type(exc).__name__


# Upstream lines that say where it happened in the user's (or a library's) code.
_CAUSED_BY = re.compile(r"^Caused by: \((.+)\)$")
_FRAME = re.compile(r'^File "([^"]+)", line (\d+), in (\S+)$')


def key_lines(exc: BaseException) -> str:
    """An upstream error capped to what a reader needs: the root cause's first line and,
    where the message says it, the line of code it happened at (the full text stays in
    the stage's log)."""
    lines = [line.strip() for line in plain(str(innermost(exc))).splitlines() if line.strip()]
    where = _located(lines)
    return root_cause(exc) + (f" (at {where})" if where else "")


def _located(lines: list[str]) -> str:
    """`Caused by: (file:line in function)`, else the last `File ..., line N, in f` frame
    with the code line under it."""
    for line in lines:
        found = _CAUSED_BY.match(line)
        if found:
            return clip(found.group(1), 120)
    frames = [(i, m) for i, line in enumerate(lines) if (m := _FRAME.match(line))]
    if not frames:
        return ""
    index, frame = frames[-1]
    file = "/".join(frame.group(1).split("/")[-2:])
    code = lines[index + 1] if index + 1 < len(lines) and not _FRAME.match(lines[index + 1]) else ""
    return clip(f"{file}:{frame.group(2)} in {frame.group(3)}" + (f": {code}" if code else ""), 200)
