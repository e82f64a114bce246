"""The release stage's comparison on resnet50: the same model republished, and a changed
one (its weights perturbed by 1 % noise: other answers, the same speed), each compared
with the deployed version `--repeats` times, to show the agreement and how the
interleaved ratios and their 95 % intervals hold on this machine, optionally while
`--load N` busy processes (started and stopped here) compete for its cores.

    .venv/bin/python benchmarks/release_compare.py [--repeats 10] [--load 1] [--precision 0.03]

Needs a finished `deploy run configs/resnet50.yaml` (its simplified ONNX and golden
references, found through runs/resnet50/summary.json). Writes
benchmarks/results/release_compare_resnet50.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from deploy.gates import references  # noqa: E402
from deploy.runtimes.interleaved import Budget  # noqa: E402
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


@contextlib.contextmanager
def busy(count: int) -> Iterator[None]:
    """`count` processes spinning on a core each: other work on the machine. Only these
    are stopped afterwards."""
    # Each spins only while this process is its parent: killed here, they end too.
    spin = f"import os\nwhile os.getppid() == {os.getpid()}: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def timed(old: Path, new: Path, cases: list, budget: Budget) -> dict:
    began, load_before = time.perf_counter(), os.getloadavg()[0]
    found = compare.compare(old, new, cases, ["logits"], 1, "golden", budget)
    return {
        "latency_ratio": found.latency_ratio,
        "latency_ci": found.latency_ci,
        "throughput_ratio": found.throughput_ratio,
        "throughput_ci": found.throughput_ci,
        "rounds": found.rounds,
        "seconds": round(time.perf_counter() - began, 1),
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "agreement": found.agreement[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--load", type=int, default=0, help="busy processes running meanwhile")
    parser.add_argument("--precision", type=float, default=Budget().precision)
    parser.add_argument("--same-only", action="store_true", help="only the model compared with itself")
    args = parser.parse_args()
    budget = Budget(precision=args.precision)
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
        result["load_processes"] = args.load
        pairs = [("same model", candidate), ("weights perturbed 1 %", changed)]
        for name, new in pairs[:1] if args.same_only else pairs:
            runs = []
            with busy(args.load):
                for i in range(args.repeats):
                    runs.append(
                        timed(deployed / "1" / compare.MODEL_FILE, new / compare.MODEL_FILE, cases, budget)
                    )
                    r = runs[-1]
                    print(
                        f"{name} #{i + 1}: latency {r['latency_ratio']:.3f} {r['latency_ci']}, throughput "
                        f"{r['throughput_ratio']:.3f} {r['throughput_ci']}, {r['rounds']} rounds, {r['seconds']} s, "
                        f"load {r['load_1min']}",
                        flush=True,
                    )
            agreement = runs[0].pop("agreement")
            for r in runs[1:]:
                r.pop("agreement")
            latency = [r["latency_ratio"] for r in runs]
            result[name] = {
                "worst_cosine": agreement.cosine,
                "top1": agreement.top1,
                "max_abs": agreement.max_abs,
                "runs": runs,
                "latency_within_5_percent": sum(abs(v - 1) <= 0.05 for v in latency),
                "latency_ratio_median": round(statistics.median(latency), 4),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(result["unchanged_decision"])
    out = ROOT / "benchmarks" / "results" / "release_compare_resnet50.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
