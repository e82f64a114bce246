"""`deploy rollback CONFIG [--to N] [--server URL]`: serve an earlier version of each of
the pipeline's models — the newest good (never rolled back) one before the version served
now, or any kept version N — by
pointing its `version_policy` at it (config.pbtxt replaced whole, the model's stamp
renewed), and keep in the rolled-back version's record that it was rolled back, so a
release does not bring the same files back without `--accept-regression`. Each live
server named is told to load the model again and checked to serve the version rolled
back to (Triton loads it before it unloads the other): the servers the config's stages
list (`servers`, as release switches them) and those `--server` adds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from deploy.pipeline.errors import StageFailed
from deploy.pipeline.project import Project


@dataclass(frozen=True)
class Rollback:
    model: str
    served: int  # before
    to: int


def plan(project: Project, to: int | None) -> tuple[list[Rollback], list[str]]:
    """What would move, and why the other models stay as they are."""
    from deploy.pipeline.publish import published_models
    from deploy.serving import releases

    repository, name = project.config.repository, project.config.name
    models = published_models(repository, name)
    if not models:
        raise StageFailed(f"nothing of '{name}' is published in {repository}: nothing to roll back")
    moves, stays = [], []
    for model in models:
        found = releases.versions(repository / model)
        if not found:
            stays.append(f"{model}: no versions")
            continue
        served = max(releases.served(repository / model) or {found[-1]})
        target = to if to is not None else releases.before(repository / model, served)
        if target is None or target not in found:
            stays.append(
                f"{model}: {f'no v{to}; has {found}' if to else f'no good version before v{served}'}"
            )
        elif target == served:
            stays.append(f"{model}: serves v{served} already")
        else:
            moves.append(Rollback(model, served, target))
    return moves, stays


def roll_back(project: Project, to: int | None, extra: list[str]) -> list[str]:
    """Rolls back and tells the servers (the config's and `extra`); returns what it did,
    one line each, first what recovering an interrupted release did."""
    from deploy.serving import releases
    from deploy.serving.release_journal import recover

    recovered = recover(project.config.repository)
    servers = list(dict.fromkeys([*configured_servers(project), *extra]))
    moves, stays = plan(project, to)
    if not moves:
        raise StageFailed(f"no model of '{project.config.name}' can roll back: {'; '.join(stays)}")
    repository, when = project.config.repository, datetime.now(UTC).isoformat(timespec="seconds")
    for move in moves:
        model_dir = repository / move.model
        releases.serve_only(model_dir, move.to)
        releases.mark_rolled_back(model_dir, move.served, f"{when} to v{move.to}")
        releases.stamp(model_dir, project.config.name)
    said = recovered + [f"{m.model}: v{m.served} -> v{m.to}" for m in moves]
    said += [f"{s} (left as it is)" for s in stays]
    said += _mirror(project)
    _switch(servers, moves, repository)
    return said + [f"{url}: switched" for url in servers]


def configured_servers(project: Project) -> list[str]:
    """The live servers the config's stages switch (any stage whose params list `servers`:
    this command never names a stage)."""
    found: list[str] = []
    for node in project.graph.nodes:
        listed = getattr(node.params, "servers", None)
        if isinstance(listed, tuple | list):
            found += [str(url) for url in listed]
    return found


def _mirror(project: Project) -> list[str]:
    """With `publish_to`, the remote copy follows (before any server is told)."""
    from deploy.pipeline.publish import published_models
    from deploy.serving.publishing import publishing
    from deploy.serving.release_mirror import mirror

    remote, config = publishing(project.config).remote, project.config
    if not remote:
        return []
    changed = mirror(
        config.repository, remote, config.name, published_models(config.repository, config.name) or []
    )
    return [f"{remote}: {', '.join(changed) or 'nothing'} updated"]


def _switch(servers: list[str], moves: list[Rollback], repository: Path) -> None:
    from deploy.serving.switch import switch_all

    problems = switch_all(servers, {m.model: m.to for m in moves})
    if problems:
        raise StageFailed(
            f"rolled back in {repository}, but not every server switched: {'; '.join(problems)}"
        )
