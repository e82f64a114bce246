"""Served vs direct: Triton end to end against the same ONNX file in this process, interleaved.

    .venv/bin/python benchmarks/served_vs_direct.py [--batches 1 8] [--max-s 120]

torchvision's resnet50 (random weights: timing only, no accuracy rests on them) exported to
ONNX once; the same file is served by deploy's python-backend model (serving/python_model.py:
ONNX Runtime inside the embedded tritonserver, one CPU instance, no dynamic batcher, so a
batch-8 request is one batch-8 execution) and run by an ONNX Runtime session here with the
same options. Per batch, rounds of ABBA windows (direct, served, served, direct:
runtimes/interleaved.py) until the ratio's 95 % interval is within ±3 % or --max-s, so a
machine's drift hits both sides alike. Reports served / direct time with its interval, the
served throughput as a share of direct (the goal: >= 0.95x at b8), the absolute per-request
difference (what Triton adds: gRPC, the python backend's shared-memory hop, the tensors'
copies) and the machine during the rounds (runtimes/contention.py).

Writes benchmarks/results/served_vs_direct_resnet50.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """name: "resnet50_python"
backend: "python"
max_batch_size: 8
input [ {{ name: "input" data_type: TYPE_FP32 dims: [3, 224, 224] }} ]
output [ {{ name: "output" data_type: TYPE_FP32 dims: [1000] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "deploy_precision" value {{ string_value: "fp32" }} }}
"""


def export(path: Path) -> None:
    import torch
    import torchvision

    net = torchvision.models.resnet50().eval()
    example = torch.randn(1, 3, 224, 224)
    torch.onnx.export(
        net,
        (example,),
        str(path),
        input_names=["input"],
        output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )


def repository(root: Path, onnx: Path) -> Path:
    import shutil

    from deploy.serving.layout import PYTHON_MODEL

    version = root / "resnet50_python" / "1"
    version.mkdir(parents=True)
    shutil.copy(onnx, version / "model.onnx")
    shutil.copy(PYTHON_MODEL, version / "model.py")
    (root / "resnet50_python" / "config.pbtxt").write_text(CONFIG.format())
    return root


def direct_call(onnx: Path, x: np.ndarray) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # as the python model builds its session
    session = ort.InferenceSession(str(onnx), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(["output"], {"input": x})


def served_call(url: str, x: np.ndarray) -> Any:
    import tritonclient.grpc as grpcclient

    conn = grpcclient.InferenceServerClient(url)
    feed = grpcclient.InferInput("input", list(x.shape), "FP32")
    feed.set_data_from_numpy(x)
    wanted = [grpcclient.InferRequestedOutput("output")]
    return lambda: conn.infer("resnet50_python", [feed], outputs=wanted).as_numpy("output")


def median_ms(call: Any, n: int = 7) -> float:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        times.append(1e3 * (time.perf_counter() - began))
    return statistics.median(times)


def one_batch(url: str, onnx: Path, batch: int, max_s: float) -> dict[str, Any]:
    from deploy.runtimes import contention
    from deploy.runtimes.interleaved import Budget, measure

    x = np.random.default_rng(batch).normal(size=(batch, 3, 224, 224)).astype(np.float32)
    direct, served = direct_call(onnx, x), served_call(url, x)
    agree = float(np.max(np.abs(direct()[0] - served())))
    start = contention.usage()
    found = measure(
        direct, served, Budget(precision=0.03, min_rounds=8, max_rounds=400, max_s=max_s, window_s=0.5)
    )
    machine = contention.between(start, contention.usage(), None, float(contention.cores()))
    d_ms, s_ms = median_ms(direct), median_ms(served)
    return {
        "batch": batch,
        "served_over_direct_time": found.text(),
        "served_throughput_share": round(1 / found.ratio, 3),
        "share_interval": [round(1 / found.high, 3), round(1 / found.low, 3)],
        "settled": found.settled,
        "direct_ms": round(d_ms, 2),
        "served_ms": round(s_ms, 2),
        "added_ms_per_request": round(s_ms - d_ms, 2),
        "max_abs_diff": agree,
        "machine": machine.text() if machine else "not measured",
    }


def main() -> None:
    from deploy.serving.launch import serve_repository
    from deploy.serving.server_spec import ServerSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--max-s", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="served-vs-direct-") as tmp:
        onnx = Path(tmp) / "resnet50.onnx"
        export(onnx)
        repo = repository(Path(tmp) / "repo", onnx)
        with serve_repository(ServerSpec(startup_timeout_s=180), repo, Path(tmp) / "work") as served:
            rows = [one_batch(served.server.grpc, onnx, b, args.max_s) for b in args.batches]
    result = {"model": "torchvision resnet50, random weights (timing only)", "rows": rows}
    print(json.dumps(result, indent=1))
    out = ROOT / "benchmarks" / "results" / "served_vs_direct_resnet50.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
