"""Memory the benchmark harness (deploy/runtimes/harness.py) holds per timed call, at its
peak (tracemalloc), over a call that does nothing: what `deploy bench --iterations N`
needs beside the model, and what its refusal of an N beyond half the available memory
assumes (`BYTES_PER_CALL` in deploy/commands/bench_cli.py).

    .venv/bin/python benchmarks/harness_memory.py [--calls 1000000]

Prints the peak bytes per call of `measure` followed by `summarize` (the report's
statistics), and the constant the CLI uses.
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from deploy.commands.bench_cli import BYTES_PER_CALL
from deploy.runtimes import harness


def peak_bytes_per_call(calls: int) -> float:
    settings = harness.Settings(
        warmup_ms=0,
        duration_s=0.0,
        iterations=calls,
        stability_windows=3,
        max_windows=3,
        percentiles=(50.0, 99.0),
    )
    tracemalloc.start()
    try:
        timing = harness.measure(lambda: None, settings)
        harness.summarize(timing, 1, settings)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / timing.completed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    args = parser.parse_args()
    found = peak_bytes_per_call(args.calls)
    print(f"peak {found:.1f} B per timed call over {args.calls} calls; the CLI assumes {BYTES_PER_CALL} B")


if __name__ == "__main__":
    main()
