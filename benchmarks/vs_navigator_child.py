"""Model Navigator's side of benchmarks/vs_navigator.py, run by the Navigator venv's python
(which sees this project's venv too): `nav.torch.optimize` cold on the config's model (the
same weights: deploy's own loader builds it), then Navigator's pick; after the pick, untimed
by the comparison, Navigator's runner and deploy's pick timed in this one process.

    python vs_navigator_child.py CONFIG WORKSPACE DEPLOY_FILE OUT_JSON

Navigator runs commands in spawned processes that import this file again: hence the guard.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

BATCHES = (1, 8)


def optimize(config_path: Path, workspace: Path) -> tuple[Any, dict[str, Any], str]:
    import model_navigator as nav
    import torch

    from deploy.api import load
    from deploy.modelio.loading import load_model

    config = load(config_path).project.config
    model = load_model(config.model)
    shape = [d if isinstance(d, int) else 1 for d in config.inputs[0].dims]  # batch 1, as its docs
    samples = [torch.randn(*shape) for _ in range(10)]
    package = nav.torch.optimize(
        model=model, dataloader=samples, target_device=nav.DeviceKind.CPU, workspace=workspace
    )
    best = package.get_best_model_status()
    runner = package.get_runner(device="cpu")
    picked = {"format": best.model_config.key, "runner": runner.name(), "statuses": _statuses(package)}
    return runner, picked, config.inputs[0].name


def _statuses(package: Any) -> dict[str, str]:
    """Each (format, runner): OK / FAIL of Navigator's correctness and performance commands."""
    found = {}
    for key, model in package.status.models_status.items():
        for runner, status in model.runners_status.items():
            found[f"{key} on {runner}"] = ", ".join(f"{k} {v.value}" for k, v in status.status.items())
    return found


def speeds(runner: Any, deploy_file: Path, ours: str) -> list[dict[str, Any]]:
    """Per batch: each pick's median latency (deploy's harness, same settings) and deploy /
    Navigator as an interleaved ratio with its 95 % interval."""
    import numpy as np

    from deploy.runtimes import interleaved
    from deploy.runtimes.catalog import for_suffix
    from deploy.runtimes.harness import Settings, measure, summarize

    plugin = for_suffix(deploy_file.suffix)
    assert plugin is not None and plugin.open_file is not None, deploy_file
    theirs_name = next(iter(runner.input_metadata.keys()))  # Navigator's input name (input__0)
    rows, settings = [], Settings(duration_s=2.0, iterations=10)
    with runner:
        for batch in BATCHES:
            x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
            made = plugin.open_file(deploy_file, {ours: x.shape}, None, "latency")

            def theirs(x: np.ndarray = x) -> object:
                return runner.infer({theirs_name: x})

            found = interleaved.measure(theirs, made.call, interleaved.Budget(max_s=30.0))
            their_ms = summarize(measure(theirs, settings), batch, settings).median_ms
            our_ms = summarize(measure(made.call, settings), batch, settings).median_ms
            rows.append(
                {"batch": batch, "navigator_ms": their_ms, "deploy_ms": our_ms, "ratio": found.text()}
            )
    return rows


def main() -> None:
    config, workspace, deploy_file, out = (Path(a) for a in sys.argv[1:5])
    started = time.time()
    runner, picked, ours = optimize(config, workspace)
    picked["picked_at"] = time.time()
    picked["in_child_s"] = picked["picked_at"] - started
    out.write_text(json.dumps(picked))  # the pick counts even if the timing below fails
    picked["speeds"] = speeds(runner, deploy_file, ours)
    out.write_text(json.dumps(picked, indent=1))


if __name__ == "__main__":
    main()
