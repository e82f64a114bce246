"""The bench stage on a CUDA GPU: eager PyTorch and TorchScript with trtexec's H2D /
GPU compute / D2H split, for the model of a pipeline config.

    python benchmarks/gpu_bench.py [configs/resnet50.yaml] [--batches 1 8 32] [--duration 3]

Writes a derived config (trace + bench with device: cuda) into a scratch directory, runs
`deploy run` on it there (its own cache) and prints the bench stage's Markdown table.
Needs torch with CUDA and a GPU; TensorRT rows need an engine, which needs TensorRT.
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


def derived(config: Path, batches: list[int], duration: float, scratch: Path) -> Path:
    data = yaml.safe_load(config.read_text())
    model = data["model"]
    for key in ("file", "checkpoint", "torchscript"):
        if key in model:  # relative to the original config's folder
            model[key] = str((config.parent / model[key]).resolve())
    bench = {"runtimes": ["eager", "torchscript"], "batches": batches, "device": "cuda", "duration_s": duration, "iterations": 50}
    data["stages"] = {"trace": data["stages"].get("trace") or {}, "bench": bench}
    data.update(cache_dir=str(scratch / "cache"), run_dir=str(scratch / "runs"), repository=str(scratch / "repo"))
    path = scratch / config.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", type=Path, default=ROOT / "configs" / "resnet50.yaml")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--duration", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as tmp:
        path = derived(args.config.resolve(), args.batches, args.duration, Path(tmp))
        proc = subprocess.run([sys.executable, "-m", "pipeline", "run", str(path)], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"deploy run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        name = yaml.safe_load(path.read_text())["name"]
        summary = json.loads((Path(tmp) / "runs" / name / "summary.json").read_text())
        bench = next(s for s in summary["stages"] if s["stage"] == "bench")
        print(Path(bench["outputs"]["table"]["path"]).read_text())
        print(json.dumps(json.loads(Path(bench["outputs"]["results"]["path"]).read_text())["host"]))


if __name__ == "__main__":
    main()
