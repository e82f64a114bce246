"""INT8 recipes side by side on one config: the quantize stage's accuracy gate (cosine vs
FP32 on the held-out inputs) and its FP32-vs-INT8 timing, per recipe.

    .venv/bin/python benchmarks/int8_recipes.py configs/minilm.yaml

Each recipe is the config's `stages.quantize` with a few keys replaced, run through
`deploy run --to quantize` in one scratch directory, so trace / export / simplify run
once and come from the cache after. A recipe whose gate fails is reported with its
numbers, not skipped. Prints a Markdown table; writes benchmarks/results/int8_<name>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPES: dict[str, dict[str, object]] = {
    "static, every op": {"recipe": "static", "op_types": None, "auto": False},
    "static, MatMul + Gemm": {"recipe": "static", "op_types": ["MatMul", "Gemm"], "auto": False},
    "dynamic, MatMul + Gemm": {"recipe": "dynamic", "op_types": ["MatMul", "Gemm"], "auto": False},
    "dynamic + auto, gate 0.993": {
        "recipe": "dynamic",
        "op_types": ["MatMul", "Gemm"],
        "auto": True,
        "gate": {"min_cosine": 0.993},
    },
}


def run_recipe(config: Path, scratch: Path, name: str, changes: dict[str, object]) -> dict[str, object]:
    data = yaml.safe_load(config.read_text())
    quantize = {**data["stages"]["quantize"], **changes}
    data["stages"]["quantize"] = {k: v for k, v in quantize.items() if v is not None}
    _absolute(data, config.parent)
    variant = scratch / "variant.yaml"
    variant.write_text(yaml.safe_dump(data))
    started = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("deploy")), "run", str(variant), "--to", "quantize"],
        cwd=scratch,
        capture_output=True,
        text=True,
    )
    summary = json.loads((scratch / "runs" / data["name"] / "summary.json").read_text())
    stage = next(s for s in summary["stages"] if s["stage"] == "quantize")
    accuracy = stage.get("metrics", {}).get("accuracy", {})
    return {
        "recipe": name,
        "passed": done.returncode == 0,
        "outputs": accuracy.get("outputs"),
        "speed": accuracy.get("speed"),
        "kept_float": accuracy.get("fallback", {}).get("kept_float", []),
        "stage_s": stage.get("seconds"),
        "wall_s": time.perf_counter() - started,
    }


def _absolute(data: dict, base: Path) -> None:
    """The variant lives elsewhere: paths the config gives relative to itself are made absolute."""
    model = data["model"]
    for key in ("file", "checkpoint", "golden_inputs", "torchscript"):
        if key in model:
            model[key] = str((base / model[key]).resolve())
    for source in ("calibration", "holdout"):
        given = data["stages"]["quantize"].get(source)
        if isinstance(given, dict) and "path" in given:
            given["path"] = str((base / given["path"]).resolve())


def table(rows: list[dict]) -> str:
    lines = [
        "| recipe | gate | cosine (all) | min sample cosine | kept FP32 | INT8 ms | FP32 ms | speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out = next(iter((r["outputs"] or {}).values()), {})
        speed = r["speed"] or {}
        lines.append(
            f"| {r['recipe']} | {'pass' if r['passed'] else 'FAIL'} | {out.get('cosine', float('nan')):.4f} | "
            f"{out.get('min_sample_cosine', float('nan')):.4f} | {len(r['kept_float'])} | "
            f"{speed.get('candidate_ms', float('nan')):.2f} | {speed.get('fp32_ms', float('nan')):.2f} | "
            f"{speed.get('speedup', float('nan')):.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, nargs="?", default=ROOT / "configs" / "minilm.yaml")
    args = parser.parse_args()
    config = args.config.resolve()
    with tempfile.TemporaryDirectory(prefix="int8-recipes-") as scratch:
        rows = [run_recipe(config, Path(scratch), name, changes) for name, changes in RECIPES.items()]
    print(f"{config.name} on {platform.processor() or platform.machine()}, {len(rows)} recipes\n")
    print(table(rows))
    out = ROOT / "benchmarks" / "results" / f"int8_{config.stem}.json"
    out.write_text(json.dumps({"config": str(config), "host": platform.node(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
