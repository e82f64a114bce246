"""The release stage's comparison on resnet50: the same model republished, and a changed
one (its weights perturbed by 1 % noise: other answers, the same speed), each compared
with the deployed version `--repeats` times, to show the agreement and how stable the
side-by-side ratios are on this machine.

    .venv/bin/python benchmarks/release_compare.py [--repeats 5] [--rounds 7]

Needs a finished `deploy run configs/resnet50.yaml` (its simplified ONNX and golden
references, found through runs/resnet50/summary.json). Writes
benchmarks/results/release_compare_resnet50.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from deploy.gates import references  # noqa: E402
from deploy.serving import releases  # noqa: E402
from deploy.stages.release import compare  # noqa: E402


def artifact(stage: str, name: str) -> Path:
    summary = json.loads((ROOT / "runs" / "resnet50" / "summary.json").read_text())
    row = next(s for s in summary["stages"] if s["stage"] == stage)
    return Path(row["outputs"][name]["path"])


def perturbed(source: Path, dest: Path) -> Path:
    model = onnx.load(str(source))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        weights = numpy_helper.to_array(init)
        if weights.dtype == np.float32 and weights.size > 1:
            noisy = weights * (1 + 0.01 * rng.standard_normal(weights.shape).astype(np.float32))
            init.CopyFrom(numpy_helper.from_array(noisy.astype(np.float32), init.name))
    dest.mkdir(parents=True)
    onnx.save(model, str(dest / compare.MODEL_FILE))
    return dest


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    onnx_file = artifact("simplify", "onnx")
    onnx_file = onnx_file / "model.onnx" if onnx_file.is_dir() else onnx_file
    golden = references.load(artifact("golden", "golden"))
    cases = [golden[label].inputs for label in ("min", "opt", "max")]
    work = Path(tempfile.mkdtemp(prefix="release-compare-"))
    try:
        deployed = work / "repo" / "resnet50_onnx"
        candidate = work / "candidate"
        candidate.mkdir()
        shutil.copyfile(onnx_file, candidate / compare.MODEL_FILE)
        record = releases.ReleaseRecord(
            "resnet50", "resnet50_onnx", 1, releases.file_digests(candidate), "now"
        )
        releases.place(deployed, candidate, record)
        unchanged = releases.unchanged(deployed, releases.file_digests(candidate))
        changed = perturbed(onnx_file, work / "changed")
        result = {"unchanged_decision": f"unchanged: v{unchanged}, no new version"}
        for name, new in (("same model", candidate), ("weights perturbed 1 %", changed)):
            runs = [
                compare.compare(
                    deployed / "1" / compare.MODEL_FILE,
                    new / compare.MODEL_FILE,
                    cases,
                    ["logits"],
                    1,
                    "golden",
                    args.rounds,
                )
                for _ in range(args.repeats)
            ]
            latency = [r.latency_ratio or 0 for r in runs]
            throughput = [r.throughput_ratio or 0 for r in runs]
            agreement = runs[0].agreement[0]
            result[name] = {
                "worst_cosine": agreement.cosine,
                "top1": agreement.top1,
                "max_abs": agreement.max_abs,
                "latency_ratio": latency,
                "throughput_ratio": throughput,
                "latency_ratio_spread": round(max(latency) - min(latency), 4),
                "latency_ratio_median": round(statistics.median(latency), 4),
            }
            print(
                f"{name}: cosine {agreement.cosine}, top-1 {agreement.top1}, latency new/old {latency}, throughput new/old {throughput}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(result["unchanged_decision"])
    out = ROOT / "benchmarks" / "results" / "release_compare_resnet50.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
