"""The two ONNX exporters side by side on the shipped configs: export time, node count
after onnxsim, ONNX Runtime latency at the opt shape, parity vs eager.

    .venv/bin/python benchmarks/exporters.py [configs/tiny.yaml ...] [--iterations 30]

Each (config, exporter) pair runs golden -> export -> simplify through `deploy run` in a
scratch directory with its own cache (the export time is the stage's own, from the run
summary); the simplified model is then timed in one ONNX Runtime session (median of
`--iterations` calls after 3 warm-up calls). Prints a Markdown table and writes
benchmarks/results/exporters.json.
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
CONFIGS = ["tiny", "mobilenetv3", "mobilenetv2", "resnet50", "minilm"]
EXPORTERS = ("torchscript", "dynamo")


def scratch_config(config: Path, exporter: str, workdir: Path) -> Path:
    data = yaml.safe_load(config.read_text())
    opset = 18 if exporter == "dynamo" else data["stages"].get("export", {}).get("opset", 17)
    data["stages"] = {"export": {"exporter": exporter, "opset": opset}, "simplify": {}}
    for key in ("file", "golden_inputs", "checkpoint"):  # relative to the original config
        if key in data["model"]:
            data["model"][key] = str((config.parent / data["model"][key]).resolve())
    data |= {"cache_dir": str(workdir / "cache"), "run_dir": str(workdir / "runs")}
    path = workdir / config.name
    path.write_text(yaml.safe_dump(data))
    return path


def run_pair(config: Path, exporter: str, iterations: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        path = scratch_config(config, exporter, Path(tmp))
        deploy = [sys.executable, "-m", "deploy", "run", str(path)]
        proc = subprocess.run(deploy, cwd=ROOT, capture_output=True, text=True)
        name = yaml.safe_load(path.read_text())["name"]
        summary = json.loads((Path(tmp) / "runs" / name / "summary.json").read_text())
        rows = {row["stage"]: row for row in summary["stages"]}
        if proc.returncode != 0:
            failed = next(r for r in rows.values() if r["status"] == "failed")
            return {"config": name, "exporter": exporter, "failed": f"{failed['stage']}: {failed['message']}"}
        onnx_path = str(Path(rows["simplify"]["outputs"]["onnx"]["path"]) / "model.onnx")  # the model dir
        return {
            "config": name,
            "exporter": exporter,
            "export_s": rows["export"]["seconds"],
            "nodes_exported": rows["export"]["metrics"]["nodes"],
            "nodes_simplified": rows["simplify"]["metrics"]["nodes_after"],
            "ort_ms": ort_median_ms(Path(onnx_path), path, iterations),
            "parity": rows["export"]["metrics"]["headline"].split("ORT vs eager: ")[-1],
        }


def ort_median_ms(model: Path, config: Path, iterations: int) -> float:
    import numpy as np
    import onnxruntime as ort

    sys.path.insert(0, str(ROOT))
    from deploy.pipeline.graph.project import load_project
    from deploy.runtimes.arrays import opt_inputs

    project = load_project(config)
    feeds = opt_inputs(project.config, project.config.inputs[0].opt[0])
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return round(float(statistics.median(times)), 2) if np.isfinite(times).all() else float("nan")


def markdown(rows: list[dict[str, object]]) -> str:
    lines = [
        "| config | exporter | export s | nodes exported | nodes after onnxsim | ORT median ms (opt shape) | parity vs eager |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['config']} | {r['exporter']} | failed: {r['failed']} | | | | |")
        else:
            lines.append(
                f"| {r['config']} | {r['exporter']} | {r['export_s']:.1f} | {r['nodes_exported']} | "
                f"{r['nodes_simplified']} | {r['ort_ms']} | {r['parity']} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", type=Path)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    configs = args.configs or [ROOT / "configs" / f"{name}.yaml" for name in CONFIGS]
    rows = [run_pair(c, e, args.iterations) for c in configs for e in EXPORTERS]
    print(markdown(rows))
    out = ROOT / "benchmarks" / "results" / "exporters.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
