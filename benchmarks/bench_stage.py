"""The bench stage with longer, steadier settings than a config's, for the tables in docs/performance.md.

    .venv/bin/python benchmarks/bench_stage.py [configs/resnet50.yaml] [--duration 3] [--batches 1 8]
    python benchmarks/bench_stage.py --device cuda --batches 1 8 32      (on a GPU machine)

cpu: the config's stages (smoke left out) with its bench runtimes, Triton included.
cuda: trace + bench of eager PyTorch and TorchScript on the GPU, with trtexec's H2D / GPU
compute / D2H split (TensorRT rows need an engine, which needs TensorRT).
Writes the derived config into a scratch directory, runs `deploy run` there (its own cache,
so a cold run first) and prints the bench stage's Markdown table and the host.
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


def derived(config: Path, args: argparse.Namespace, scratch: Path) -> Path:
    data = yaml.safe_load(config.read_text())
    model = data["model"]
    for key in ("file", "checkpoint", "torchscript"):
        if key in model:  # relative to the original config's folder
            model[key] = str((config.parent / model[key]).resolve())
    stages = data["stages"]
    bench = {
        **(stages.get("bench") or {}),
        "batches": args.batches,
        "device": args.device,
        "duration_s": args.duration,
        "iterations": 20,
    }
    if args.device == "cuda":
        data["stages"] = {
            "trace": stages.get("trace") or {},
            "bench": {**bench, "runtimes": ["eager", "torchscript"]},
        }
    else:
        data["stages"] = {name: params for name, params in stages.items() if name != "smoke"} | {
            "bench": bench
        }
    data.update(
        cache_dir=str(scratch / "cache"), run_dir=str(scratch / "runs"), repository=str(scratch / "repo")
    )
    path = scratch / config.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", type=Path, default=ROOT / "configs" / "resnet50.yaml")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--duration", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-stage-") as tmp:
        path = derived(args.config.resolve(), args, Path(tmp))
        proc = subprocess.run(
            [sys.executable, "-m", "deploy", "run", str(path)], cwd=ROOT, capture_output=True, text=True
        )
        if proc.returncode != 0:
            sys.exit(f"deploy run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        name = yaml.safe_load(path.read_text())["name"]
        summary = json.loads((Path(tmp) / "runs" / name / "summary.json").read_text())
        bench = next(s for s in summary["stages"] if s["stage"] == "bench")
        print(Path(bench["outputs"]["table"]["path"]).read_text())
        print(json.dumps(json.loads(Path(bench["outputs"]["results"]["path"]).read_text())["host"]))


if __name__ == "__main__":
    main()
