"""`deploy rollback CONFIG [--to N] [--server URL]`: serve an earlier version of each of
the pipeline's models — the newest good (never rolled back) one before the version served
now, or any kept version N — by pointing its `version_policy` at it (config.pbtxt
replaced whole), as one journaled transaction (serving/release_journal.rolling_back): a
kill at any write is completed by the next command, which says so.

The records keep the history a line: the version a rollback leaves is marked rolled back
when it goes to an older one (a release then does not bring the same files back without
`--accept-regression`); `--to` a newer version rolls nothing back, and a version served
again is good again. Each live server named is told to load the model again and checked
to serve the version rolled to (Triton loads it before it unloads the other): the servers
the config's stages list (`servers`, as release switches them) and those `--server` adds.
A repository holding what deploy never placed (a version dir copied in by hand) is
refused first, naming it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from deploy.pipeline.errors import DeployError, StageFailed
from deploy.pipeline.graph.project import Project


class NoSuchVersion(StageFailed):
    """`--to N` where no model of the pipeline keeps a version N: the command line's mistake."""


@dataclass(frozen=True)
class Rollback:
    model: str
    served: int  # before
    to: int


def plan(repository: Path, name: str, to: int | None) -> tuple[list[Rollback], list[str]]:
    """What would move, and why the other models stay as they are."""
    from deploy.pipeline.publish.readback import published_models
    from deploy.serving import releases

    models = published_models(repository, name)
    if not models:
        raise StageFailed(f"nothing of '{name}' is published in {repository}: nothing to roll back")
    moves, stays = [], []
    for model in models:
        move, stay = _one(repository / model, to)
        moves += [move] if move else []
        stays += [f"{model}: {stay}"] if stay else []
    if to is not None and not any(to in releases.versions(repository / m) for m in models):
        raise NoSuchVersion(f"no model of '{name}' keeps a v{to}: {'; '.join(stays)}")
    return moves, stays


def _one(model_dir: Path, to: int | None) -> tuple[Rollback | None, str]:
    from deploy.serving import releases

    found = releases.versions(model_dir)
    if not found:
        return None, "no versions"
    served = max(releases.served(model_dir) or {found[-1]})
    target = to if to is not None else releases.before(model_dir, served)
    if target is None or target not in found:
        return None, f"no v{to}; has {found}" if to else f"no good version before v{served}"
    if target == served:
        return None, f"serves v{served} already"
    return Rollback(model_dir.name, served, target), ""


def roll_back(project: Project, to: int | None, extra: list[str]) -> list[str]:
    """The config's pipeline rolled back, its live servers told (the config's and `extra`)."""
    from deploy.serving.publishing import publishing

    servers = list(dict.fromkeys([*configured_servers(project), *extra]))
    config = project.config
    return roll_back_in(config.repository, config.name, to, servers, publishing(config).remote)


def roll_back_in(
    repository: Path, name: str, to: int | None, servers: list[str], remote: str | None = None
) -> list[str]:
    """Rolls back every model of the pipeline that can move, as one transaction; returns
    what it did, one line each, first what recovering an interrupted transaction did."""
    from deploy.pipeline.store import locks

    with locks.repository(repository):  # a release or publish in progress: after it, not amid it
        return _roll_back(repository, name, to, servers, remote)


def _refuse_altered(repository: Path, name: str) -> None:
    """A rollback restamps what it moves: files edited or removed since they were published
    would be taken in as verified, so they are refused first, as `deploy serve` refuses them."""
    from deploy.pipeline.publish.published_check import not_as_published

    if found := not_as_published(repository, name, None):
        raise StageFailed(
            f"{repository} does not hold what was published, so nothing is rolled back: {'; '.join(found[:8])}; "
            "`deploy serve CONFIG --repair` puts the files back from the cache, `deploy run` publishes again"
        )


def _roll_back(
    repository: Path, name: str, to: int | None, servers: list[str], remote: str | None
) -> list[str]:
    from deploy.serving import releases
    from deploy.serving.foreign import refuse_foreign
    from deploy.serving.release_journal import recover, rolling_back

    recovered = recover(repository)
    try:
        refuse_foreign(repository, name)
        moves, stays = plan(repository, name, to)  # reads only: nothing published is said first
        _refuse_altered(repository, name)
        if not moves:
            raise StageFailed(f"no model of '{name}' can roll back: {'; '.join(stays)}")
    except DeployError as exc:  # what recovering did is said even where nothing rolls back
        if recovered and exc.args:
            exc.args = (f"{'; '.join(recovered)}. {exc.args[0]}", *exc.args[1:])
        raise
    when = datetime.now(UTC).isoformat(timespec="seconds")
    planned = [
        (m.model, m.to, releases.serving_only(repository / m.model, m.to), marks(m, when)) for m in moves
    ]
    problems = rolling_back(repository, name, planned, servers, remote)  # mirrored, then the servers told
    if problems:
        raise StageFailed(
            f"rolled back in {repository}, but not every server switched: {'; '.join(problems)}"
        )
    said = recovered + [f"{m.model}: v{m.served} -> v{m.to}" for m in moves]
    said += [f"{s} (left as it is)" for s in stays]
    said += [f"{remote}: mirrored"] if remote else []
    return said + [f"{url}: switched" for url in servers]


def marks(move: Rollback, when: str) -> dict[str, str | None]:
    """The records a move changes, and nothing else: the version it leaves is rolled back
    when it goes to an older one (a move to a newer one rolls nothing back), and the
    version it serves again is good again."""
    found: dict[str, str | None] = {str(move.to): None}
    if move.to < move.served:
        found[str(move.served)] = f"{when} to v{move.to}"
    return found


def configured_servers(project: Project) -> list[str]:
    """The live servers the config's stages switch (any stage whose params list `servers`:
    this command never names a stage)."""
    found: list[str] = []
    for node in project.graph.nodes:
        listed = getattr(node.params, "servers", None)
        if isinstance(listed, tuple | list):
            found += [str(url) for url in listed]
    return found
