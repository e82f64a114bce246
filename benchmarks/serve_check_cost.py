"""What checking a published repository by digest costs before `deploy serve` or smoke
start a server (deploy.pipeline.publish.published_check): every file of the pipeline's models,
hashed cold (no stat memo: every byte read) and warm (the cache's stat memo, as `deploy
serve` runs it after the first check remembered each file).

    .venv/bin/python benchmarks/serve_check_cost.py configs/resnet50.yaml
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def project_and_repeats() -> tuple[Any, int]:
    """A repository benchmark's command line: CONFIG (loaded: its Project) and --repeats."""
    from deploy.pipeline.graph.project import load_project

    parser = argparse.ArgumentParser()
    parser.add_argument("config", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    return load_project(args.config), args.repeats


def main() -> None:
    from deploy.pipeline.publish.published_check import altered
    from deploy.pipeline.store.objects import Store

    project, repeats = project_and_repeats()
    repository, name = project.config.repository, project.config.name
    size = sum(p.stat().st_size for p in repository.rglob("*") if p.is_file())
    found = {}
    for label, store in (("cold (every byte hashed)", None), ("warm (stat memo)", Store(project.cache_dir))):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            problems = altered(repository, name, store)
            times.append(time.perf_counter() - start)
        found[label] = {"median_s": round(sorted(times)[len(times) // 2], 3), "altered": len(problems)}
        if store is not None:
            store.memo.save()
    print(json.dumps({"repository": str(repository), "bytes": size, **found}, indent=1))


if __name__ == "__main__":
    main()
