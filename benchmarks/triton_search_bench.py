"""The Triton config search on a full-size model, with its wall time: the config's
pipeline up to `triton_config`, then `triton_search` with a bounded space on the embedded
tritonserver (python backend on CPU here).

    .venv/bin/python benchmarks/triton_search_bench.py [configs/resnet50.yaml]

Prints the search's table (every configuration, its best admissible throughput and tail
latency, why its sweep stopped) and the stage's wall time; writes
benchmarks/results/triton_search_<name>.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SEARCH = {
    "space": {"instance_counts": [1, 2], "max_queue_delays_us": [None, 2000], "concurrency": [1, 2, 4]},
    "warmup_ms": 300,
    "duration_s": 2.0,
    "iterations": 10,
    "percentiles": [50, 90, 99],
    "max_windows": 5,
}
KEEP = ("trace", "export", "simplify", "triton_config")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, nargs="?", default=ROOT / "configs" / "resnet50.yaml")
    config = parser.parse_args().config.resolve()
    data = yaml.safe_load(config.read_text())
    data["stages"] = {k: v for k, v in data["stages"].items() if k in KEEP}
    data["stages"]["triton_config"] = {
        **data["stages"]["triton_config"],
        "formats": ["python"],
        "precisions": ["fp32"],
    }
    data["stages"]["triton_search"] = SEARCH
    with tempfile.TemporaryDirectory(prefix="search-") as scratch:
        variant = Path(scratch) / "search.yaml"
        variant.write_text(yaml.safe_dump(data))
        done = subprocess.run(
            [str(Path(sys.executable).with_name("deploy")), "run", str(variant)], cwd=scratch
        )
        summary = json.loads((Path(scratch) / "runs" / data["name"] / "summary.json").read_text())
    stage = next(s for s in summary["stages"] if s["stage"] == "triton_search")
    table = next(t for t in stage["metrics"]["report"] if t["title"].startswith("Triton config search"))
    print(f"\n{table['title']}\n")
    print("| " + " | ".join(table["columns"]) + " |\n|" + "---|" * len(table["columns"]))
    for row in table["rows"]:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print(f"\nstage wall time {stage['seconds']:.1f} s; {stage['metrics']['headline']}")
    out = ROOT / "benchmarks" / "results" / f"triton_search_{data['name']}.json"
    out.write_text(json.dumps({"exit": done.returncode, "stage": stage}, indent=1))


if __name__ == "__main__":
    main()
