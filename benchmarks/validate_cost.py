"""What plain `deploy validate` costs: wall time and peak memory (the process's maximum
resident set) of `deploy validate CONFIG`, median of `--repeats` fresh processes, and
whether torch was imported on the way (it must not be: validate reads the config only;
`--probe` is the one that builds the model).

    .venv/bin/python benchmarks/validate_cost.py [configs/resnet50.yaml] [--repeats 11]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK = (
    "import sys, runpy; sys.argv = ['deploy', 'validate', {config!r}]\n"
    "try:\n    runpy.run_module('deploy', run_name='__main__')\n"
    "except SystemExit as e:\n    code = e.code\n"
    "print('TORCH', 'torch' in sys.modules, 'OPENVINO', 'openvino' in sys.modules, file=sys.stderr)\n"
)


def once(config: str) -> tuple[float, float]:
    """(seconds, peak MB) of one `deploy validate` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "deploy", "validate", config], capture_output=True, text=True
    )
    took = time.perf_counter() - began
    assert done.returncode == 0, done.stdout + done.stderr
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KB on Linux: the largest child so far
    return took, max(peak, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", nargs="?", default="configs/resnet50.yaml")
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    imported = subprocess.run(
        [sys.executable, "-c", CHECK.format(config=args.config)], capture_output=True, text=True
    )
    print(imported.stderr.strip().splitlines()[-1])
    runs = [once(args.config) for _ in range(args.repeats)]
    seconds = sorted(t for t, _ in runs)
    print(
        f"deploy validate {args.config}: median {statistics.median(seconds):.3f} s "
        f"(min {seconds[0]:.3f}, max {seconds[-1]:.3f}) over {args.repeats} processes; "
        f"peak RSS {max(m for _, m in runs):.0f} MB"
    )


if __name__ == "__main__":
    main()
