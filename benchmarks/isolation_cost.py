"""What running each stage in a child process costs: cold and warm `deploy run` of a
config with every stage isolated (the default) and with `isolate: false` everywhere.

    .venv/bin/python benchmarks/isolation_cost.py [configs/resnet50.yaml] [--repeat 2]
        [--stages export,simplify,validate]

Each cold run is a fresh process in a scratch directory with an empty cache; the two
modes alternate (isolated, in-process, isolated, ...) so that the machine's drift hits
both alike. Warm runs: 5 of each mode on the last cold run's cache, median. By default
every stage of the config runs; `--stages` keeps a subset (leaving out the stages whose
time is their own measuring, bench and quantize, makes the relative cost larger).
Prints a Markdown table and writes benchmarks/results/isolation_<name>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def scratch_config(config: Path, stages: list[str], isolate: bool, work: Path) -> Path:
    data = yaml.safe_load(config.read_text())
    kept = {name: dict(data["stages"].get(name) or {}) for name in stages or data["stages"]}
    for params in kept.values():
        params["isolate"] = isolate
    data["stages"] = kept
    for key in ("file", "golden_inputs", "checkpoint", "torchscript"):
        if key in data["model"]:
            data["model"][key] = str((config.parent / data["model"][key]).resolve())
    data |= {k: str(work / k) for k in ("cache_dir", "run_dir", "repository")}
    path = work / config.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def timed(path: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "deploy", "run", str(path)], cwd=ROOT, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", nargs="?", default=str(ROOT / "configs" / "resnet50.yaml"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--stages", default="", help="comma-separated; default: all the config's")
    args = parser.parse_args()
    config, stages = Path(args.config).resolve(), [s for s in args.stages.split(",") if s]
    cold: dict[str, list[float]] = {"isolated": [], "in-process": []}
    warm: dict[str, list[float]] = {"isolated": [], "in-process": []}
    with tempfile.TemporaryDirectory(prefix="isolation-") as tmp:
        for i in range(args.repeat):
            for mode, isolate in (("isolated", True), ("in-process", False)):
                work = Path(tmp) / f"{mode}-{i}"
                work.mkdir()
                path = scratch_config(config, stages, isolate, work)
                cold[mode].append(timed(path))
                print(f"cold {mode}: {cold[mode][-1]:.1f} s", flush=True)
                if i == args.repeat - 1:
                    timed(path)  # discarded: the first warm run lays out trees
                    warm[mode] = [timed(path) for _ in range(5)]
    result = {
        "config": config.name,
        "stages": stages or "all",
        "cold_s": cold,
        "warm_s": warm,
        "cold_median_s": {m: statistics.median(v) for m, v in cold.items()},
        "warm_median_s": {m: statistics.median(v) for m, v in warm.items()},
    }
    base, isolated = result["cold_median_s"]["in-process"], result["cold_median_s"]["isolated"]
    result["cold_cost_pct"] = round(100 * (isolated - base) / base, 1)
    print(
        f"| mode | cold s (median of {args.repeat}) | warm s (median of 5) |\n|---|---|---|\n"
        + "\n".join(
            f"| {m} | {result['cold_median_s'][m]:.1f} | {result['warm_median_s'][m]:.2f} |" for m in cold
        )
        + f"\n\nisolation costs {result['cold_cost_pct']} % on the cold run"
    )
    out = ROOT / "benchmarks" / "results" / f"isolation_{config.stem}.json"
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
