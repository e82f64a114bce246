"""A warm no-op `deploy run` against the import time of the CLI's own libraries.

    .venv/bin/python benchmarks/warm_run.py [configs/resnet50.yaml] [--rounds 11]

Needs the config's cache warm (it runs the pipeline once first: minutes when cold).
Each round times, as fresh processes in this order: `python -c "import pydantic, typer,
rich.console, yaml"` (the libraries' import), `deploy run CONFIG` (a warm no-op,
replayed from its footprint) and `deploy run CONFIG -v` (the same run checked stage by
stage, the full path, which also renews the footprint). Reports the medians and their
ratios to the import time (goal: the warm no-op <= 2x), and writes
benchmarks/results/warm_run_<name>.json. Ratios measured in one invocation compare; raw
seconds vary up to 2x between days on these VMs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPORTS = "import pydantic, typer, rich.console, yaml"
NOTE = "nothing changed since the run that finished"


def deploy_command() -> list[str]:
    script = Path(sys.executable).with_name("deploy")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "deploy"]


def timed(command: list[str]) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return took, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", nargs="?", default="configs/resnet50.yaml")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    deploy = [*deploy_command(), "run", args.config]
    timed(deploy + ["-v"])  # warm the cache (a cold one builds here) and keep a footprint
    kinds = {"imports": [sys.executable, "-c", IMPORTS], "replayed": deploy, "full": deploy + ["-v"]}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind, command in kinds.items():
            took, out = timed(command)
            if kind == "replayed" and not out.startswith(NOTE):
                raise SystemExit(f"the warm run was not replayed:\n{out[:2000]}")
            times[kind].append(took)
    medians = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "config": args.config,
        "rounds": args.rounds,
        "host": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "median_s": {k: round(v, 3) for k, v in medians.items()},
        "ratio_to_imports": {k: round(v / medians["imports"], 2) for k, v in medians.items()},
        "times_s": {k: [round(t, 3) for t in v] for k, v in times.items()},
    }
    out = ROOT / "benchmarks" / "results" / f"warm_run_{Path(args.config).stem}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print("| run | median s | × imports |\n|---|---|---|")
    for kind in kinds:
        print(f"| {kind} | {medians[kind]:.3f} | {medians[kind] / medians['imports']:.2f} |")
    print(f"written: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
