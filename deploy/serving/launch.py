"""The one way to serve a repository, used by the smoke stage, the bench stage and
`deploy serve`: find its models, keep those the server can load, start the server (or
reach an existing one), and wait until each model is READY or has failed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import deploy.serving.repository
from deploy.pipeline.errors import StageFailed
from deploy.serving import tritonserver
from deploy.serving.model_state import UNKNOWN, LoadState, ModelState
from deploy.serving.repository import Model
from deploy.serving.server_spec import ServerSpec

# (models found, a lazy "which backends does the server have") -> the models to load
Chooser = Callable[[dict[str, Model], Callable[[], set[str] | None]], list[str]]


def loadable_models(found: dict[str, Model], backends: Callable[[], set[str] | None]) -> list[str]:
    """The default choice: every model whose backend the server has (all, when unknown)."""
    return deploy.serving.repository.loadable(found, backends())


@dataclass
class Served:
    server: tritonserver.Server
    repository: Path  # the directory the server reads
    found: dict[str, Model]  # every model in the repository
    states: dict[str, LoadState]  # the chosen models, after loading


@contextmanager
def serve_repository(
    spec: ServerSpec,
    repository: Path,
    workdir: Path,
    choose: Chooser = loadable_models,
    private: bool = True,
    origins: Mapping[str, str] | None = None,
    remote: str | None = None,
    idle_at_end: bool = False,
) -> Iterator[Served]:
    """`private`: serve a hard-linked copy (the server writes beside its models, which must
    not reach the cache); `deploy serve` serves the published directory itself. `remote`:
    the server reads this URL instead (a published copy of `repository`, e.g. on S3);
    the models are still found in `repository`. `idle_at_end`: tritonserver.serving's."""
    local = remote is None and private
    tree = (
        deploy.serving.repository.private_copy(repository, workdir / "repository")
        if local
        else repository.absolute()
    )
    found = deploy.serving.repository.models(tree)
    names = choose(found, lambda: deploy.serving.repository.backends(spec, workdir))
    with tritonserver.serving(spec, remote or tree, names, workdir, origins, idle_at_end) as server:
        yield Served(
            server, tree, found, wait_models(server, names, time.monotonic() + spec.startup_timeout_s)
        )


def wait_models(server: tritonserver.Server, models: list[str], deadline: float) -> dict[str, LoadState]:
    """Polls until each model is READY or UNAVAILABLE; those still loading at the
    deadline are reported as timed out."""
    states: dict[str, LoadState] = {}
    while time.monotonic() < deadline:
        states = _index(server, states)
        if all(states.get(m, UNKNOWN).settled for m in models):
            return {m: states[m] for m in models}
        time.sleep(0.2)
    return {m: _final(states.get(m, UNKNOWN)) for m in models}


def _index(server: tritonserver.Server, last: dict[str, LoadState]) -> dict[str, LoadState]:
    """The server's index; `last` again while our server runs but does not answer (a
    moment's refusal under load). A server that ended is named with its own end."""
    try:
        return tritonserver.repository_index(server)
    except OSError as exc:  # urllib's URLError is one
        ended = tritonserver.exited(server, "while its models loaded")
        if ended is not None:
            raise ended from exc
        if server.process is None:  # a server someone else runs (kind url) went away
            raise StageFailed(
                f"the server at {server.http} stopped answering while its models loaded: {exc}"
            ) from exc
        return last


def _final(state: LoadState) -> LoadState:
    if state.settled:
        return state
    return LoadState(
        ModelState.TIMEOUT, f"not ready before the startup timeout (state {state.state.value.lower()})"
    )
