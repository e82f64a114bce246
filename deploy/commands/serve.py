"""`deploy serve`: the published repository on a Triton server, in the foreground, with
the server settings the config gives its serving stage (any stage whose params hold a
`server`: the engine and this command never name a stage)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.project import Project
from deploy.pipeline.publish.readback import complete
from deploy.pipeline.store.locks import alive
from deploy.pipeline.store.objects import Store
from deploy.serving import tritonserver
from deploy.serving.launch import Served, loadable_models, serve_repository
from deploy.serving.repository import Model, models, skip_reason
from deploy.serving.server_spec import ServerSpec

Say = Callable[[str], None]


def server_setting(project: Project) -> tuple[ServerSpec, str]:
    """The first stage's `server` spec and its config path; the defaults when none has one."""
    for node in project.graph.nodes:
        spec = getattr(node.params, "server", None)
        if isinstance(spec, ServerSpec):
            return spec, f"stages.{node.name}.server"
    return ServerSpec(), "server (defaults)"


@dataclass(frozen=True)
class PublishedCheck:
    """How the published files are checked before the server starts."""

    store: Store | None  # the cache: its stat memo spares rehashing, its objects repair
    repair: bool = False  # put back from the cache what was altered, instead of refusing


def serve(
    name: str,
    spec: ServerSpec,
    repository: Path,
    say: Say,
    origins: dict[str, str],
    remote: str | None = None,
    check: PublishedCheck = PublishedCheck(None),
) -> None:
    """Until Ctrl-C, SIGTERM or SIGHUP; each stops the server, removes the temp dir and
    returns normally (a requested stop is a success). `origins`: where explicit ports
    came from (e.g. {"http_port": "--http-port"}), for the error when one is taken.
    `remote`: the server reads this published copy (`publish_to`, as written) instead."""
    from deploy.pipeline.store import locks
    from deploy.pipeline.store.leftovers import sweep_cache
    from deploy.serving.release_journal import recover

    # From the first moment: a SIGTERM while the repository is checked was exit 143, unsaid.
    with tritonserver.stop_requests():
        try:
            # A live release is waited for, never reverted; no publish changes what is checked.
            with locks.repository(repository, create=False):
                for line in recover(repository):  # a release killed half way: settled before serving
                    say(line)
                if check.store is not None:
                    sweep_cache(check.store.root)
                if not any(m.startswith(f"{name}_") for m in models(repository)):
                    raise StageFailed(f"no models of '{name}' in {repository}; run `deploy run` first")
                _verify(name, remote or repository, check, say)
            _serve_until_stopped(name, spec, repository, say, origins, remote)
        except tritonserver.StopRequested as stop:
            say(f"{stop}; server stopped")


def _verify(name: str, where: Path | str, check: PublishedCheck, say: Say) -> None:
    """Every published file as published (by digest), or refused naming the files; with
    `repair`, altered files are put back from the cache first."""
    from deploy.pipeline.publish.published_check import altered, repair

    missing = complete(where, name)
    if missing and check.repair and check.store is not None and isinstance(where, Path):
        for line in repair(
            where, altered(where, name, check.store), check.store
        ):  # resized or gone: put back
            say(line)
        missing = complete(where, name)
    if missing:  # a publish that died half way, or files removed since: never served
        raise StageFailed(
            f"{where} does not hold '{name}' whole, so it is not served: "
            f"{'; '.join(missing[:8])}; `deploy serve --repair` puts back what the cache holds, "
            "`deploy run` publishes again"
        )
    if isinstance(where, Path):
        _foreign(where, name, check, say)
    found = altered(where, name, check.store if isinstance(where, Path) else None)
    if found and check.repair and check.store is not None:
        for line in repair(where, found, check.store):
            say(line)
    elif found:
        raise StageFailed(
            f"{where} does not hold what was published, so it is not served: "
            f"{'; '.join(a.text() for a in found[:8])}; `deploy serve --repair` puts the files back from the cache"
        )
    if check.store is not None:
        check.store.memo.save()


def _foreign(repository: Path, name: str, check: PublishedCheck, say: Say) -> None:
    """What no publish or release placed: refused, or with `repair` moved aside (never deleted)."""
    from deploy.serving.foreign import foreign, move_aside, refuse_foreign

    found = foreign(repository, name)
    if found and check.repair:
        for line in move_aside(repository, found):
            say(line)
    refuse_foreign(repository, name)


def _serve_until_stopped(
    name: str, spec: ServerSpec, repository: Path, say: Say, origins: dict[str, str], remote: str | None
) -> None:
    from deploy.serving.publishing import triton_url

    _sweep(say)
    with (
        tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp,
        serve_repository(
            spec,
            repository,
            Path(tmp),
            _of_pipeline(name),
            private=False,
            origins=origins,
            remote=triton_url(remote) if remote else None,
        ) as served,
    ):
        _announce(served, name, say, remote or str(repository))
        server = served.server
        while server.process is None or server.process.poll() is None:
            time.sleep(0.5)
        raise StageFailed(f"tritonserver exited; log tail:\n{server.log_tail()}")


TEMP_PREFIX = "deploy-serve-"  # + the serving process's pid + '-': a killed one's is found by it


def _sweep(say: Say) -> None:
    """Removes what a `deploy serve` killed with SIGKILL left in the temp dir: its pid is
    in the name, and a dir whose process is gone is no one's."""
    import re
    import shutil

    for found in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*"):
        owner = re.match(rf"{TEMP_PREFIX}(\d+)-", found.name)
        if owner is not None and found.is_dir() and not alive(int(owner.group(1))):
            shutil.rmtree(found, ignore_errors=True)
            say(f"removed {found}, left by a deploy serve that was killed (pid {owner.group(1)})")


def _announce(served: Served, name: str, say: Say, reads: str) -> None:
    server = served.server
    metrics = f"http://{server.metrics}/metrics" if server.metrics else "(not known for this server)"
    say(
        f"HTTP     http://{server.http}\ngRPC     {server.grpc}\nmetrics  {metrics}\n"
        f"server log  {server.log_path}\nrepository  {reads}"
    )
    for model, state in served.states.items():
        say(f"model {model}: {state}")
    for model in sorted(m for m in served.found if m.startswith(f"{name}_") and m not in served.states):
        say(f"model {model}: not loaded ({skip_reason(served.found[model].backend)})")
    say("serving; Ctrl-C or SIGTERM stops the server")


def _of_pipeline(name: str) -> Any:
    """The loadable models of this pipeline (a shared repository holds others too)."""

    def choose(found: dict[str, Model], backends: Callable[[], set[str] | None]) -> list[str]:
        return loadable_models({m: info for m, info in found.items() if m.startswith(f"{name}_")}, backends)

    return choose
