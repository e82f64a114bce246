"""How an error leaves the CLI: the taxonomy's kinds as one message and their exit code,
without a traceback unless -v; a bug in deploy itself with its traceback, as such."""

from __future__ import annotations

import os
import traceback
from typing import TYPE_CHECKING

from rich.text import Text

from deploy.pipeline.errors import (
    DeployError,
    EnvError,
    ExitCode,
    MissingDependency,
    StageFailed,
    disk_full,
)

if TYPE_CHECKING:
    from rich.console import Console


def failed(err: Console, exc: Exception, verbose: bool) -> int:
    """The message and exit code of an error: the user's kinds without a traceback (unless
    -v), a bug in deploy itself with one."""
    known = known_error(exc)
    if known is None:
        err.print(traceback.format_exc(), markup=False, highlight=False)
        err.print("[bold red]internal error[/] in deploy itself; please report it with the traceback above")
        return ExitCode.INTERNAL
    if verbose:
        err.print(traceback.format_exc(), markup=False, highlight=False)
    # A failed check says what failed; the other kinds name themselves (ConfigError, ...).
    # The label is styled, the message is not markup: model names, paths and server log
    # lines hold brackets that markup would eat, misread, or choke on (a stray `[/]`).
    kind = "" if isinstance(known, StageFailed) else f" ({type(known).__name__})"
    err.print(Text.assemble(("error", "bold red"), f"{kind}: {known}"), highlight=False)
    return known.exit_code


def known_error(exc: Exception) -> DeployError | None:
    """The taxonomy's error for `exc`: itself, a missing extra (a stage's are caught in its
    process), a full disk (the machine's, not a bug: exit 4, naming the path); None for a bug."""
    if isinstance(exc, DeployError):
        return exc
    if isinstance(exc, ModuleNotFoundError):
        from deploy.pipeline.graph.extras import install_hint

        name = exc.name or str(exc)
        return MissingDependency(f"the package '{name.split('.')[0]}'", install_hint(name))
    return disk_full(exc)


def check_cwd() -> None:
    """Relative paths (the config's, the cache's) start in the current directory: one
    deleted since the shell entered it is said first (it was a FileNotFoundError deep in a
    stage, or a native library's fatal error)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise EnvError(
            "the current directory no longer exists (removed after this shell entered it): cd to one that does"
        ) from None


# Commands whose stop leaves a cache to resume from: said so; any other stop is just a stop.
RESUMABLE = ("run",)


def interrupted(err: Console, by: str | None) -> int:
    import sys

    command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    left = ": the cache holds only completed stages; rerun to resume" if command in RESUMABLE else ""
    err.print(f"[yellow]interrupted[/] ({by or 'Ctrl-C'}){left}")
    return ExitCode.INTERRUPTED
