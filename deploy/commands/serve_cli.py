"""`deploy serve`: its arguments; the work is deploy/commands/serve.py's and the ports serving/ports.py's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from deploy.commands.cli_common import CacheOpt, ConfigArg
from deploy.commands.cli_common import console as _console
from deploy.commands.cli_common import project as _project
from deploy.domain.issues import Issue
from deploy.pipeline.errors import (
    ConfigError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from deploy.pipeline.graph.project import Project


_PORT_HELP = "port. Default: the config's {0}, else Triton's 8000 / 8001 / 8002 when all are free (what `deploy infer` tries), else free ones. Taken: exit 4."


HttpPort = Annotated[
    int | None, typer.Option(min=1, max=65535, help="HTTP " + _PORT_HELP.format("http_port"))
]
GrpcPort = Annotated[
    int | None, typer.Option(min=1, max=65535, help="gRPC " + _PORT_HELP.format("grpc_port"))
]
MetricsPort = Annotated[
    int | None, typer.Option(min=1, max=65535, help="Metrics " + _PORT_HELP.format("metrics_port"))
]
Published = Annotated[
    bool,
    typer.Option(
        "--published",
        help="Serve the copy at triton_config.publish_to (e.g. s3://): the server reads it itself.",
    ),
]
Repair = Annotated[
    bool,
    typer.Option(
        "--repair",
        help="Put back from the cache any published file found altered (default: refuse to serve).",
    ),
]


def serve(
    config: ConfigArg,
    http_port: HttpPort = None,
    grpc_port: GrpcPort = None,
    metrics_port: MetricsPort = None,
    published: Published = False,
    repair: Repair = False,
    cache_dir: CacheOpt = None,
) -> None:
    """Serve the generated model repository on a local tritonserver; prints its HTTP, gRPC
    and metrics addresses. Ctrl-C, SIGTERM or SIGHUP stop it (server and temp dir gone)
    and exit 0; exit 1 if the server dies on its own, 4 if a port asked for is taken. Every
    published file is checked against its digest first: an altered one is refused (exit 1),
    or with --repair put back from the cache."""
    from deploy.commands.serve import PublishedCheck, server_setting
    from deploy.commands.serve import serve as serve_repository
    from deploy.pipeline.store.objects import Store
    from deploy.serving.ports import serve_ports

    project = _project(config, cache_dir)
    spec, where = server_setting(project)
    given = {"http_port": http_port, "grpc_port": grpc_port, "metrics_port": metrics_port}
    chosen = serve_ports(spec, given, where, str(config))
    say = _sayer()
    if chosen.note:
        say(chosen.note)
    remote = _published(project, config) if published else None
    check = PublishedCheck(Store(project.cache_dir), repair)
    update = spec.model_copy(update=chosen.ports)
    serve_repository(
        project.config.name, update, project.config.repository, say, chosen.origins, remote, check
    )


def _sayer() -> Callable[[str], None]:
    console = _console()

    def say(line: str) -> None:  # model names and server reasons are text, never markup
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    return say


def _published(project: Project, config: Path) -> str:
    from deploy.serving.publishing import publishing

    remote = publishing(project.config).remote
    if remote is None:
        issue = Issue("stages.triton_config.publish_to", "not set: --published serves the copy it names")
        raise ConfigError(str(config), [issue])
    return remote
