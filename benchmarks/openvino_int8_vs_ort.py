"""OpenVINO against ONNX Runtime on the artifacts of `deploy run configs/resnet50.yaml` (or
configs/minilm.yaml: `--model minilm`, batches of its shipped sentences at 64 tokens), FP32
and INT8, in one process, alternating: per round each runtime is timed in turn (the order
rotating every round), and the ratio of medians to ONNX Runtime at the same precision is
reported per batch.

    .venv/bin/python benchmarks/openvino_int8_vs_ort.py [--model resnet50|minilm] [--rounds 3]
        [--batches 1 32] [--seconds 6]

Runtimes: ONNX Runtime on the simplified ONNX (FP32) and on quantize's INT8 model (resnet50:
Q/DQ, uint8 activations; MiniLM: dynamic INT8 MatMuls); OpenVINO on the openvino stage's IR computing in f32 and in bf16 (the
CPU plugin's default where the CPU has it), and on openvino_int8's NNCF IR (its float parts
in f32, and in the plugin's default). Latency hint, default threads, one request. resnet50:
random weights and random calibration (the config's): speed does not depend on their
values; the outputs are compared to say what each runtime computes. Writes
benchmarks/results/openvino_int8_vs_ort_<model>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from openvino_vs_ort import _cosine, _median_ms  # noqa: E402 - the same timing as the FP32 comparison

REFERENCE = {"fp32": "onnxruntime fp32", "int8": "onnxruntime int8"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--seconds", type=float, default=6.0, help="per round, shared by the runtimes")
    parser.add_argument("--model", choices=("resnet50", "minilm"), default="resnet50")
    args = parser.parse_args()
    runtimes = _runtimes(_artifacts(ROOT / "runs" / args.model / "summary.json"))
    results = {
        str(b): _batch(runtimes, _feeds(args.model, b), args.rounds, args.seconds) for b in args.batches
    }
    out = ROOT / "benchmarks" / "results" / f"openvino_int8_vs_ort_{args.model}.json"
    out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


def _artifacts(summary: Path) -> dict[str, Path]:
    stages = json.loads(summary.read_text())["stages"]
    found = {k: Path(v["path"]) for s in stages for k, v in s["outputs"].items()}
    return {
        "onnx": found["onnx"] / "model.onnx",
        "onnx_int8": found["onnx_int8"] / "model.onnx",
        "openvino": found["openvino"] / "model.xml",
        "openvino_int8": found["openvino_int8"] / "model.xml",
    }


def _feeds(model: str, batch: int) -> dict[str, np.ndarray]:
    if model == "resnet50":
        return {"input": np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    data = np.load(ROOT / "configs" / "data" / "sentences.npz")
    return {name: data[name][:batch] for name in ("input_ids", "attention_mask")}


def _runtimes(files: dict[str, Path]) -> dict[str, Callable[[dict[str, np.ndarray]], Any]]:
    from deploy.runtimes.onnxrt import OnnxRuntime
    from deploy.runtimes.openvinort import Compute, OpenVino, lacks

    found: dict[str, Any] = {
        "onnxruntime fp32": OnnxRuntime(files["onnx"]),
        "openvino fp32 (f32)": OpenVino(files["openvino"]),
        "onnxruntime int8": OnnxRuntime(files["onnx_int8"]),
        "openvino int8 (NNCF, float parts f32)": OpenVino(files["openvino_int8"]),
    }
    if lacks(Compute.BF16) is None:
        found["openvino fp32 computed in bf16"] = OpenVino(files["openvino"], compute=Compute.BF16)
        found["openvino int8 (NNCF, float parts bf16)"] = OpenVino(
            files["openvino_int8"], compute=Compute.BF16
        )
    for name, runtime in found.items():
        if hasattr(runtime, "settings"):
            print(name, runtime.settings(), file=sys.stderr)
    return {name: (lambda x, r=r: next(iter(r.infer(x).values()))) for name, r in found.items()}


def _batch(
    runtimes: dict[str, Callable[[dict[str, np.ndarray]], Any]],
    x: dict[str, np.ndarray],
    rounds: int,
    seconds: float,
) -> dict:
    batch = len(next(iter(x.values())))
    answers = {name: np.asarray(call(x)) for name, call in runtimes.items()}  # also a warm-up
    medians: dict[str, list[float]] = {name: [] for name in runtimes}
    names = list(runtimes)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            medians[name].append(_median_ms(runtimes[name], x, seconds / len(names)))
    result = {}
    for name, m in medians.items():
        reference = REFERENCE["int8" if "int8" in name else "fp32"]
        result[name] = {
            "median_ms": round(statistics.median(m), 2),
            "items_per_s": round(1000 * batch / statistics.median(m), 1),
            "vs " + reference: round(statistics.median(medians[reference]) / statistics.median(m), 3),
            "per_round_ratio": [round(a / b, 3) for a, b in zip(medians[reference], m)],
            "cosine_to_onnxruntime_fp32": round(_cosine(answers[name], answers[REFERENCE["fp32"]]), 6),
        }
    return result


if __name__ == "__main__":
    main()
