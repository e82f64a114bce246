"""Pipeline wall times: cold run, warm no-op rerun, and a tolerance-only edit.

    .venv/bin/python benchmarks/pipeline_bench.py [configs/resnet50.yaml] [--repeat 5]

Each measurement is a fresh `deploy run` process in a scratch directory with its own
cache; warm runs start 5 s after the cold one, after one discarded warm run. Prints a Markdown table and writes benchmarks/results/pipeline_<name>.json.
The warm run also lists any heavy library it imported (the goal: none).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "onnx", "onnxruntime", "onnxsim", "tensorrt", "tritonclient")
PROBE = (
    "import sys, runpy; sys.argv = ['deploy', 'run', {config!r}];\n"
    "from deploy.cli import main\n"
    "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
    "print('HEAVY=' + ','.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def deploy_command() -> list[str]:
    """The `deploy` console script beside this interpreter (what users run), else -m."""
    script = Path(sys.executable).with_name("deploy")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "deploy"]


def timed_run(config: Path, cwd: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run([*deploy_command(), "run", str(config)], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"deploy run failed:\n{proc.stderr}")
    summary = json.loads(
        (cwd / "runs" / yaml.safe_load(config.read_text())["name"] / "summary.json").read_text()
    )
    return wall, {s["stage"]: s["status"] for s in summary["stages"]}


def heavy_in_warm_run(config: Path, cwd: Path) -> list[str]:
    code = PROBE.format(config=str(config), heavy=HEAVY)
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY="))
    return [m for m in line.removeprefix("HEAVY=").split(",") if m]


def edited_copy(config: Path, scratch: Path) -> Path:
    data = yaml.safe_load(config.read_text())
    data["stages"]["validate"] = {**(data["stages"].get("validate") or {}), "atol": 0.001}
    for key in ("file", "checkpoint", "torchscript"):
        if data["model"].get(key):
            data["model"][key] = str((config.parent / data["model"][key]).resolve())
    path = scratch / f"edited_{config.name}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", nargs="?", default=str(ROOT / "configs" / "resnet50.yaml"))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    config = Path(args.config).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        cold, cold_status = timed_run(config, scratch)
        # Let the machine settle after a minute-long CPU-bound run (the server's exit, file
        # system write-back), and discard one warm run, as any timing loop warms up.
        time.sleep(5)
        timed_run(config, scratch)
        warm = [timed_run(config, scratch) for _ in range(args.repeat)]
        heavy = heavy_in_warm_run(config, scratch)
        edit_wall, edit_status = timed_run(edited_copy(config, scratch), scratch)
    result = {
        "config": str(config.relative_to(ROOT) if config.is_relative_to(ROOT) else config),
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version()},
        "cold_s": round(cold, 2),
        "cold_status": cold_status,
        "warm_s": [round(w, 3) for w, _ in warm],
        "warm_median_s": round(statistics.median(w for w, _ in warm), 3),
        # "skipped" is a remembered skip (e.g. build without TensorRT): no work either.
        "warm_all_cached": all(set(s.values()) <= {"cached", "skipped"} for _, s in warm),
        "warm_heavy_imports": heavy,
        "tolerance_edit_s": round(edit_wall, 2),
        "tolerance_edit_reran": sorted(n for n, s in edit_status.items() if s == "ran"),
    }
    out = ROOT / "benchmarks" / "results" / f"pipeline_{config.stem}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(_markdown(result))


def _cpu() -> str:
    try:
        return next(
            ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")
        )
    except (OSError, StopIteration):
        return platform.processor()


def _markdown(r: dict) -> str:
    return "\n".join(
        [
            f"| measurement ({r['config']}, {r['machine']['cores']}x {r['machine']['cpu']}) | result |",
            "|---|---|",
            f"| cold `deploy run` (empty cache) | {r['cold_s']} s |",
            f"| warm no-op rerun, median of {len(r['warm_s'])} | {r['warm_median_s']} s (all cached: {r['warm_all_cached']}) |",
            f"| heavy libraries imported by the warm run | {', '.join(r['warm_heavy_imports']) or 'none'} |",
            f"| rerun after editing only validate.atol | {r['tolerance_edit_s']} s; reran: {', '.join(r['tolerance_edit_reran'])} |",
        ]
    )


if __name__ == "__main__":
    main()
