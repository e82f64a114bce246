"""What a run with every stage cached would still publish: a local destination that does
not hold the cached output its stage publishes there (a run stopped before its verdict
could publish, a repository changed or deleted by hand). `deploy plan` says it, and its
`--detailed-exitcode` counts it as work the next run does."""

from __future__ import annotations

from pathlib import Path

from deploy.pipeline.graph.dag import rewritten
from deploy.pipeline.graph.plan import cached_outputs
from deploy.pipeline.graph.project import Project
from deploy.pipeline.publish.readback import holds_tree
from deploy.pipeline.store.objects import Store


def unpublished(project: Project, store: Store) -> list[str]:
    """One line per local destination a fully cached run would publish to; [] when some
    stage runs anyway (the plan's rows say so) or everything is in place."""
    resolved = cached_outputs(project, store)
    if resolved is None:
        return []
    nodes, name = project.graph.nodes, project.config.name
    found = []
    for node in nodes:
        for artifact in node.spec.outputs:
            output = resolved.get(f"{node.name}.{artifact.name}")
            if output is None or rewritten(node, artifact.name, nodes):
                continue
            for dest in node.spec.destinations(node.params, project.config, artifact):
                if isinstance(dest, Path) and not holds_tree(store, output, dest, name):
                    found.append(
                        f"{dest} does not hold {node.name}'s cached {artifact.name}: the next run publishes it"
                    )
    return found
