"""`deploy releases` and `deploy rollback`: the released versions of a pipeline's models."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from deploy.commands.cli_common import CacheOpt, ConfigArg, console, project
from deploy.domain.vocabulary import SERVER_URL
from deploy.pipeline.errors import ExitCode


def releases(
    config: ConfigArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the versions as JSON.")] = False,
    cache_dir: CacheOpt = None,
) -> None:
    """List the versions published for the pipeline's models, with their release records."""
    from deploy.pipeline.publish.published_check import not_as_published
    from deploy.pipeline.store import locks
    from deploy.pipeline.store.leftovers import sweep_cache
    from deploy.pipeline.store.objects import Store
    from deploy.releasing.release_list import release_rows, show
    from deploy.serving.release_journal import recover

    found = project(config, cache_dir)
    repository = found.config.repository
    with locks.repository(repository, create=False):  # a live release is waited for, never reverted
        for line in recover(repository):  # a killed release first: the list says what is
            print(line, file=sys.stderr)
        sweep_cache(found.cache_dir)
        rows = release_rows(found)
        changed = not_as_published(repository, found.config.name, Store(found.cache_dir)) if rows else []
    if changed:
        print(
            f"warning: {repository} does not hold what was released: {'; '.join(changed[:8])}; "
            "`deploy serve CONFIG --repair` puts the files back from the cache, `deploy run` publishes again",
            file=sys.stderr,
        )
    show(rows, console(), as_json, str(repository))


def rollback(
    config: ConfigArg,
    to: Annotated[
        int | None,
        typer.Option("--to", min=1, help="The version to serve (default: the one before the served one)."),
    ] = None,
    server: Annotated[
        list[str],
        typer.Option(
            "--server",
            help="HTTP endpoint of a live server to switch too (repeatable), beside the config's `servers`.",
        ),
    ] = [],  # noqa: B006
    cache_dir: CacheOpt = None,
) -> None:
    """Serve an earlier released version of the pipeline's models, and switch live servers to it."""
    from deploy.pipeline.store.leftovers import sweep_cache
    from deploy.releasing.rollback import NoSuchVersion, roll_back

    _check_servers(server)
    out = console()  # SIGTERM and SIGHUP stop it as Ctrl-C does (cli.main): said, not silent
    with _stop_says(lambda: "nothing was rolled back"):  # before anything was read
        found = project(config, cache_dir)
    try:
        with _stop_says(lambda: _left(found.config.repository, found.config.name)):
            sweep_cache(found.cache_dir)
            lines = roll_back(found, to, server)
    except NoSuchVersion as exc:  # a mistake on the command line: exit 2, as typer's own
        raise typer.BadParameter(str(exc), param_hint="--to") from None
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def _check_servers(server: list[str]) -> None:
    """Before the journal names them: recovery would carry a bad one forever."""
    for url in server:
        if not re.match(SERVER_URL, url):
            raise typer.BadParameter(
                f"'{url}' is not a server's HTTP endpoint (http://HOST:PORT)", param_hint="--server"
            )


@contextlib.contextmanager
def _stop_says(left: Callable[[], str]) -> Iterator[None]:
    """A stop inside the block (its KeyboardInterrupt, or a library's error made of it:
    an import it broke) ends the command with one line saying what it `left`, exit 130."""
    from deploy.pipeline.process import stopping

    try:
        yield
    except KeyboardInterrupt as stop:
        _interrupted(str(stop) or "Ctrl-C", left())
    except Exception:
        if by := stopping.stopped_by():
            _interrupted(by, left())
        raise


def _left(repository: Path, pipeline: str) -> str:
    """What a stopped rollback left: nothing changed, or a journal the next command completes."""
    from deploy.serving import release_journal

    if release_journal.path(repository, pipeline).exists():
        return "its journal is in the repository: the next `deploy rollback`, `releases`, `serve` or `run` completes it"
    return "nothing was rolled back"


def _interrupted(by: str, left: str) -> NoReturn:
    from deploy.pipeline.process import stopping

    print(f"interrupted ({by}): {left}", file=sys.stderr)
    stopping.said()
    raise typer.Exit(ExitCode.INTERRUPTED)
