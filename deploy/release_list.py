"""`deploy releases CONFIG`: the versions published for a pipeline's models in its local
repository, each with its release record (deploy.serving.releases) and whether a server
reading the repository serves it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.console import Console

from deploy.screen import plain_table, rich_table

if TYPE_CHECKING:
    from deploy.pipeline.project import Project

COLUMNS = [
    "model",
    "version",
    "served",
    "made",
    "checkpoint",
    "accuracy",
    "latency_ms",
    "throughput",
    "selected for",
    "build",
    "note",
]


def release_rows(project: Project) -> list[dict[str, Any]]:
    """One row per version of every model the pipeline published; [] if it never did."""
    from deploy.pipeline.publish import published_models
    from deploy.serving import releases

    repository, rows = project.config.repository, []
    for model in published_models(repository, project.config.name) or []:
        model_dir = repository / model
        served = releases.served(model_dir) if (model_dir / "config.pbtxt").is_file() else set()
        for release in releases.releases(model_dir):
            row = {"model": model, **releases.summary(release), "served": release.version in served}
            rows.append(row)
    return rows


def show(rows: list[dict[str, Any]], console: Console, as_json: bool, where: str) -> None:
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    if not rows:
        console.print(f"no releases: nothing of this pipeline is published in {where}", soft_wrap=True)
        return
    table = [[_cell(row.get(c)) for c in COLUMNS] for row in rows]
    title = f"deploy releases: {where}"
    if console.is_terminal:
        console.print(rich_table(title, COLUMNS, table))
        return
    for line in plain_table(title, COLUMNS, table):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _cell(value: object) -> str:
    if value is True:
        return "yes"
    if value is None or value is False:
        return ""
    return str(value)
