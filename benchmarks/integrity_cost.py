"""What the integrity checks cost a warm no-op run, and what a full verify would cost.

    .venv/bin/python benchmarks/integrity_cost.py --before /path/to/older/checkout [--runs 11]

`--before` is a checkout of the commit before the checks (with its own `.venv`, set up by
its scripts/setup.sh) whose `configs/resnet50.yaml` has been run once; this checkout's
has been run once too (each warm in its own cache and repository). Warm no-op runs
alternate between the two, so both see the same machine load; the medians and their
ratio are printed. Then `deploy cache verify` (every object and laid-out tree rehashed)
is timed here, and the bytes it reads counted: the cost a full check on every run would
add. Writes benchmarks/results/integrity_cost.json. The runs write bytecode, as Python
does by default ($PYTHONDONTWRITEBYTECODE is dropped for them: with it, every module
changed since its last .pyc recompiles on every run, which measures the edit, not the code).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/resnet50.yaml"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def warm_run(checkout: Path) -> float:
    began = time.perf_counter()
    proc = subprocess.run(
        [str(checkout / ".venv" / "bin" / "deploy"), "run", CONFIG],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=ENV,
    )
    seconds = time.perf_counter() - began
    if proc.returncode != 0 or " ran " in proc.stdout:
        raise SystemExit(f"not a warm no-op run in {checkout}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return seconds


def full_verify(checkout: Path) -> tuple[float, int]:
    cache = checkout / ".deploy-cache"
    size = sum(p.stat().st_size for p in (cache / "objects").rglob("*") if p.is_file())
    began = time.perf_counter()
    proc = subprocess.run(
        [str(checkout / ".venv" / "bin" / "deploy"), "cache", "verify"],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=ENV,
    )
    if proc.returncode != 0:
        raise SystemExit(f"deploy cache verify failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.perf_counter() - began, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout of the commit before the checks")
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    checkouts = {"before": args.before.resolve(), "after": ROOT}
    times: dict[str, list[float]] = {name: [] for name in checkouts}
    for checkout in checkouts.values():
        warm_run(checkout)  # discarded: page cache and the stat memo settle
    for _ in range(args.runs):
        for name, checkout in checkouts.items():
            times[name].append(warm_run(checkout))
    medians = {name: statistics.median(values) for name, values in times.items()}
    verify_s, verified_bytes = full_verify(ROOT)
    result = {
        "config": CONFIG,
        "runs": args.runs,
        "median_s": medians,
        "ratio_after_before": medians["after"] / medians["before"],
        "all_s": times,
        "cache_verify_s": verify_s,
        "cache_bytes": verified_bytes,
    }
    out = ROOT / "benchmarks" / "results" / "integrity_cost.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("| warm no-op run of resnet50 | median of", args.runs, "|")
    print("|---|---|")
    for name in checkouts:
        print(f"| {name} | {medians[name]:.3f} s |")
    print(f"| after / before | {result['ratio_after_before']:.2f} |")
    print(f"| `deploy cache verify` (rehash {verified_bytes / 1e6:.0f} MB) | {verify_s:.2f} s |")


if __name__ == "__main__":
    main()
