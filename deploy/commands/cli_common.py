"""What the CLI's command modules share: the config argument, the console, the project."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from deploy.console.terminal import make_console

if TYPE_CHECKING:
    from deploy.pipeline.graph.project import Project

ConfigArg = Annotated[Path, typer.Argument(help="Pipeline YAML, e.g. configs/resnet50.yaml.")]


def directory(text: str) -> Path:
    """--cache-dir's value: "" (an unset variable expanded, `--cache-dir "$CACHE"`) is refused;
    as a path it is the current directory, which the cache would have filled."""
    if not text.strip():
        raise typer.BadParameter("an empty path; give a directory (or leave the option out)")
    return Path(text).expanduser()  # a quoted '~/cache' too: never a directory named ~


# One --wait-quiet for `deploy run` (before bench times anything) and `deploy bench FILE`.
WaitQuietOpt = Annotated[
    float | None,
    typer.Option(
        "--wait-quiet",
        metavar="SECONDS",
        min=0,
        envvar="DEPLOY_WAIT_QUIET",
        help="Before timing, wait up to SECONDS for the machine to be quiet (other processes under 25 % of the "
        "cores for 5 s); still busy: exit 8, saying so, with nothing timed.",
    ),
]

# One --cache-dir for every command that takes it (run, plan, cache ...).
CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        parser=directory,
        metavar="DIR",
        help="Artifact store (overrides the config and $DEPLOY_CACHE_DIR).",
    ),
]


def console() -> Console:
    from deploy.pipeline.process.logs import console_stream

    return make_console(file=console_stream())


def project(config: Path, cache_dir: Path | None) -> Project:
    from deploy.pipeline.graph.project import load_project

    return load_project(config, cache_dir)
