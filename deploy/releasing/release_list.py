"""`deploy releases CONFIG`: the versions published for a pipeline's models in its local
repository, each with its release record (deploy.serving.releases) and whether a server
reading the repository serves it: the checkpoint, the comparison with the version it
replaced (ratios are time new / deployed, as the release table says), what it was checked
on, the reason a refused release was accepted, and whether it was rolled back."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from rich.console import Console

from deploy.console.screen import plain_table, rich_table

if TYPE_CHECKING:
    from deploy.pipeline.graph.project import Project
    from deploy.serving.releases import Comparison, Release

COLUMNS = [
    "model",
    "version",
    "served",
    "made",
    "checkpoint",
    "compared",
    "checked on",
    "accuracy",
    "latency_ms",
    "throughput",
    "selected for",
    "accepted",
    "rolled back",
    "build",
    "note",
]
CHECKPOINT_CHARS = 16


def release_rows(project: Project) -> list[dict[str, Any]]:
    """One row per version of every model the pipeline published; [] if it never did."""
    from deploy.pipeline.publish.readback import published_models
    from deploy.serving import releases
    from deploy.serving.foreign import foreign

    repository, rows = project.config.repository, []
    strange = {f.path: f for f in foreign(repository, project.config.name)}
    for model in published_models(repository, project.config.name) or []:
        model_dir = repository / model
        served = releases.served(model_dir) if (model_dir / "config.pbtxt").is_file() else set()
        for release in releases.releases(model_dir):
            row = {"model": model, **summary(release), "served": release.version in served}
            if f"{model}/{release.version}" in strange:  # never served as the pipeline's: refused
                row |= {"served": "FOREIGN", "note": FOREIGN_NOTE}
            rows.append(row)
    rows += [
        {"model": f.path, "served": "FOREIGN", "note": FOREIGN_NOTE}
        for f in strange.values()
        if f.kind == "model dir"
    ]
    return rows


FOREIGN_NOTE = (
    "no publish or release placed it: deploy serve refuses it; `deploy serve --repair` moves it aside"
)


def summary(release: Release) -> dict[str, Any]:
    """One row of `deploy releases`."""
    record = release.record
    if record is None:
        return {"version": release.version, "note": release.problem or ""}
    return {
        "version": release.version,
        "made": record.made,
        "checkpoint": record.checkpoint_sha256[:CHECKPOINT_CHARS],
        "compared": compared(record.comparison),
        "checked on": record.inputs or (record.comparison.inputs if record.comparison else ""),
        "accuracy": ", ".join(f"{k} {v:.5f}" for k, v in record.accuracy.items()),
        "latency_ms": record.latency_ms,
        "throughput": record.throughput,
        "note": f"latency_ms and throughput were timed {record.timing_flag}" if record.timing_flag else "",
        "selected for": ", ".join(record.selected_for),
        "accepted": record.accepted_regression or "",
        "rolled back": record.rolled_back or "",
        "build": record.build_url or "",
    }


def compared(c: Comparison | None) -> str:
    """The comparison with the version it replaced: agreement, then time new / deployed."""
    if c is None:
        return ""
    said = [f"vs v{c.against}: cosine {min((a.cosine for a in c.agreement), default=float('nan')):.6f}"]
    sizes = [a.scale for a in c.agreement if a.scale is not None]
    if sizes:  # the size furthest from the deployed's, by factor
        said.append(f"size {max(sizes, key=lambda s: abs(math.log(s)) if s > 0 else math.inf):.4g}x")
    for what, ratio, ci in (
        ("latency", c.latency_ratio, c.latency_ci),
        ("per item", c.per_item_ratio, c.per_item_ci),
    ):
        if ratio is not None:
            said.append(f"{what} {ratio:.3f}x" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
    if c.machine:
        said.append(f"{c.threads} threads, {c.machine}")
    return ", ".join(said)


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
