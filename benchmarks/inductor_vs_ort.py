"""The compiled PyTorch path (an AOTInductor package, as the inductor stage builds it)
against ONNX Runtime and OpenVINO on resnet50, CPU, FP32, in one process, alternating: per
round each runtime is timed in turn (the order rotating every round), and the ratio of
medians to ONNX Runtime is reported per batch with its per-round spread, so a verdict
never rests on one noisy round. Eager PyTorch is timed beside them as the baseline.

    .venv/bin/python benchmarks/inductor_vs_ort.py [--rounds 7] [--batches 1 8] [--seconds 2]

Random weights (torchvision resnet50, weights=None): the speed does not depend on their
values; outputs are compared only to say the runtimes agree. The package is compiled
from torch.export with a dynamic batch (1..32), as the stage does; its compile time is
reported. Where the CPU has bf16, OpenVINO's bf16 compute is timed too. Writes
benchmarks/results/inductor_vs_ort_resnet50.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
from openvino_vs_ort import _cosine, _rounds  # noqa: E402 - the same timing as the OpenVINO comparison

THREADS = 2
STABLE_SPREAD = 0.10  # per-round ratios within ±10 % of their median: a stable ratio


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runtimes, compile_s = _runtimes(Path(tmp))
        results = {str(b): _batch(runtimes, b, args.rounds, args.seconds) for b in args.batches}
    found = {
        "host": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {THREADS} threads each",
        "weights": "random (torchvision resnet50, weights=None): timing only",
        "inductor_compile_s": compile_s,
        "batches": results,
    }
    out = ROOT / "benchmarks" / "results" / "inductor_vs_ort_resnet50.json"
    out.write_text(json.dumps(found, indent=1))
    print(json.dumps(found, indent=1))


def _runtimes(tmp: Path) -> tuple[dict[str, Callable[[np.ndarray], Any]], float]:
    import openvino as ov
    import torch
    import torchvision

    from deploy.runtimes.onnxrt import OnnxRuntime
    from deploy.runtimes.openvinort import Compute, OpenVino, lacks

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    model = torchvision.models.resnet50(weights=None).eval()
    example = torch.randn(4, 3, 224, 224)
    onnx_file = tmp / "model.onnx"
    torch.onnx.export(
        model, (example,), str(onnx_file), input_names=["x"], output_names=["y"],
        dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, opset_version=17, dynamo=False,
    )  # fmt: skip
    ov.save_model(ov.convert_model(str(onnx_file)), str(tmp / "model.xml"))
    package, compile_s = _package(model, example, tmp)
    ort = OnnxRuntime(onnx_file, threads=THREADS)
    vino = OpenVino(tmp / "model.xml", threads=THREADS)
    found = {
        "onnxruntime": lambda x: ort.infer({"x": x})["y"],
        "openvino": lambda x: vino.infer({"x": x})["y"],
        "inductor (AOTInductor package)": lambda x: _torch_call(package, x),
        "eager pytorch": lambda x: _torch_call(model, x),
    }
    if lacks(Compute.BF16) is None:
        bf16 = OpenVino(tmp / "model.xml", threads=THREADS, compute=Compute.BF16)
        found["openvino bf16"] = lambda x: bf16.infer({"x": x})["y"]
    return found, compile_s


def _package(model: Any, example: Any, tmp: Path) -> tuple[Any, float]:
    import torch
    import torch._inductor

    batch = torch.export.Dim("batch", min=1, max=32)
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    began = time.perf_counter()
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp / "model.pt2"))
    compile_s = round(time.perf_counter() - began, 1)
    print(f"AOTInductor package compiled in {compile_s} s", file=sys.stderr)
    return torch._inductor.aoti_load_package(path), compile_s


def _torch_call(module: Any, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return module(torch.from_numpy(x)).numpy()


def _batch(runtimes: dict[str, Callable[[np.ndarray], Any]], batch: int, rounds: int, seconds: float) -> dict:
    medians, answers = _rounds(runtimes, batch, rounds, seconds)
    reference = answers["onnxruntime"]
    return {name: _row(m, medians["onnxruntime"], answers[name], reference) for name, m in medians.items()}


def _row(mine: list[float], ort: list[float], answer: np.ndarray, reference: np.ndarray) -> dict:
    ratios = [a / b for a, b in zip(ort, mine)]
    middle = statistics.median(ratios)
    stable = all(abs(r / middle - 1) <= STABLE_SPREAD for r in ratios)
    verdict = (
        "faster in every round"
        if min(ratios) > 1
        else "slower in every round"
        if max(ratios) < 1
        else "mixed"
    )
    verdict = "the reference" if mine is ort else verdict
    return {
        "median_ms": round(statistics.median(mine), 2),
        "speedup_vs_onnxruntime": round(statistics.median(ort) / statistics.median(mine), 3),
        "per_round_ratio": [round(r, 3) for r in ratios],
        "ratio_stable": stable,
        "vs_onnxruntime": verdict,  # holds whatever the spread: the verdict a decision may rest on
        "cosine_to_onnxruntime": round(_cosine(answer, reference), 7),
    }


if __name__ == "__main__":
    main()
