"""OpenVINO against ONNX Runtime on resnet50 (CPU, FP32), in one process, alternating: per
round each runtime is timed in turn (the order rotating every round), two threads each,
and the ratio of medians is reported per batch. Also times the IR converted directly from
the PyTorch module, to decide which IR the openvino stage makes.

    .venv/bin/python benchmarks/openvino_vs_ort.py [--rounds 7] [--batches 1 8] [--seconds 2]
        [--onnx runs/…/model.onnx]

Where the CPU has bf16, also times the FP32 IR computed in bf16 (the CPU plugin's default
there). Random weights (torchvision resnet50, weights=None): the speed does not depend on their
values; outputs are compared only to say the runtimes agree. The ONNX is exported here
with the legacy exporter, or given with --onnx (e.g. the simplified ONNX of a `deploy run
configs/resnet50.yaml`: its input `input`, output `logits`). Writes
benchmarks/results/openvino_vs_ort_resnet50.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
THREADS = 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--onnx", type=Path, help="time this ONNX (resnet50's, input 'input') instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runtimes = _runtimes(Path(tmp), args.onnx)
        results = {str(b): _batch(runtimes, b, args.rounds, args.seconds) for b in args.batches}
    out = ROOT / "benchmarks" / "results" / "openvino_vs_ort_resnet50.json"
    out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


def _runtimes(tmp: Path, given: Path | None) -> dict[str, Callable[[np.ndarray], Any]]:
    import openvino as ov
    import torch
    import torchvision

    from deploy.runtimes.onnxrt import OnnxRuntime
    from deploy.runtimes.openvinort import Compute, OpenVino, lacks

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    example = torch.randn(1, 3, 224, 224)
    onnx_file = given or tmp / "model.onnx"
    if given is None:
        torch.onnx.export(
            model, (example,), str(onnx_file), input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, opset_version=17, dynamo=False,
        )  # fmt: skip
    ov.save_model(ov.convert_model(str(onnx_file)), str(tmp / "from_onnx.xml"))
    direct = ov.convert_model(model, example_input=example, input=[(-1, 3, 224, 224)])
    direct.inputs[0].get_tensor().set_names({"x"})  # PyTorch's tensors carry no names
    direct.outputs[0].get_tensor().set_names({"y"})
    ov.save_model(direct, str(tmp / "from_torch.xml"))
    ort = OnnxRuntime(onnx_file, threads=THREADS)
    x_name, y_name = ("input", "logits") if given else ("x", "y")
    from_onnx = OpenVino(tmp / "from_onnx.xml", threads=THREADS)
    from_torch = OpenVino(tmp / "from_torch.xml", threads=THREADS)
    print("openvino settings:", from_onnx.settings(), file=sys.stderr)
    found = {
        "onnxruntime": lambda x: ort.infer({x_name: x})[y_name],
        "openvino (IR from ONNX)": lambda x: from_onnx.infer({x_name: x})[y_name],
        "openvino (IR from PyTorch)": lambda x: from_torch.infer({"x": x})["y"],
    }
    if lacks(Compute.BF16) is None:  # the CPU plugin's default on this CPU
        bf16 = OpenVino(tmp / "from_onnx.xml", threads=THREADS, compute=Compute.BF16)
        found["openvino bf16 (IR from ONNX)"] = lambda x: bf16.infer({x_name: x})[y_name]
    return found


def _rounds(
    runtimes: dict[str, Callable[[np.ndarray], Any]], batch: int, rounds: int, seconds: float
) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    """Each runtime's median per round (the order rotating every round) and its answers."""
    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    answers = {name: np.asarray(call(x)) for name, call in runtimes.items()}  # also a warm-up
    medians: dict[str, list[float]] = {name: [] for name in runtimes}
    names = list(runtimes)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            medians[name].append(_median_ms(runtimes[name], x, seconds / len(names)))
    return medians, answers


def _batch(runtimes: dict[str, Callable[[np.ndarray], Any]], batch: int, rounds: int, seconds: float) -> dict:
    medians, answers = _rounds(runtimes, batch, rounds, seconds)
    reference = answers["onnxruntime"]
    base = statistics.median(medians["onnxruntime"])
    return {
        name: {
            "median_ms": round(statistics.median(m), 2),
            "speedup_vs_onnxruntime": round(base / statistics.median(m), 3),
            "per_round_ratio": [round(a / b, 3) for a, b in zip(medians["onnxruntime"], m)],
            "cosine_to_onnxruntime": round(_cosine(answers[name], reference), 7),
        }
        for name, m in medians.items()
    }


def _median_ms(call: Callable[[np.ndarray], Any], x: np.ndarray, seconds: float) -> float:
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        start = time.perf_counter()
        call(x)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


if __name__ == "__main__":
    main()
