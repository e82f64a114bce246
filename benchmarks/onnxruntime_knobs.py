"""ONNX Runtime's own knobs on this CPU: intra-op threads, graph optimization level,
execution mode and thread spinning, each varied alone from the defaults the project uses
(threads = ORT's default, ORT_ENABLE_ALL, sequential, spinning on), on the models a
`deploy run` left in the cache (resnet50 FP32 and INT8, MiniLM FP32 and INT8). In one
process, alternating: per round every setting is timed in turn (the order rotating), and
the median of the rounds' medians is reported as a ratio to the defaults.

    .venv/bin/python benchmarks/onnxruntime_knobs.py [--rounds 5] [--seconds 1.5]

Needs `deploy run configs/resnet50.yaml` (and configs/minilm.yaml) run first: the models
are read from runs/<name>/summary.json. Random weights for resnet50 (speed does not depend
on their values); MiniLM's real ones. Writes benchmarks/results/onnxruntime_knobs.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name -> session options set on top of the defaults
SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "threads=1": {"intra_op_num_threads": 1},
    "threads=2": {"intra_op_num_threads": 2},
    "opt=basic": {"graph_optimization_level": "ORT_ENABLE_BASIC"},
    "opt=extended": {"graph_optimization_level": "ORT_ENABLE_EXTENDED"},
    "mode=parallel": {"execution_mode": "ORT_PARALLEL"},
    "no spinning": {"config": {"session.intra_op.allow_spinning": "0"}},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5)
    args = parser.parse_args()
    results = {}
    for label, (path, feeds) in _models().items():
        results[label] = _compare(path, feeds, args.rounds, args.seconds)
        print(label, json.dumps(results[label]), flush=True)
    out = ROOT / "benchmarks" / "results" / "onnxruntime_knobs.json"
    out.write_text(json.dumps(results, indent=1))


def _models() -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    found = {}
    image = {"input": np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)}
    data = np.load(ROOT / "configs" / "data" / "sentences.npz")
    sentence = {k: data[k][:1, :32] for k in ("input_ids", "attention_mask")}
    for name, feeds in (("resnet50", image), ("minilm", sentence)):
        outputs = _outputs(name)
        for artifact in ("onnx", "onnx_int8"):
            if artifact in outputs:
                found[f"{name} {artifact} b1"] = (Path(outputs[artifact]) / "model.onnx", feeds)
    return found


def _outputs(name: str) -> dict[str, str]:
    summary = ROOT / "runs" / name / "summary.json"
    if not summary.exists():
        return {}
    stages = json.loads(summary.read_text())["stages"]
    return {
        k: v["path"]
        for s in stages
        for k, v in s["outputs"].items()
        if s["stage"] in ("simplify", "quantize")
    }


def _session(path: Path, knobs: dict[str, Any]) -> Callable[[dict[str, np.ndarray]], Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    for key, value in knobs.items():
        if key == "config":
            for k, v in value.items():
                options.add_session_config_entry(k, v)
        elif key == "graph_optimization_level":
            options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, value)
        elif key == "execution_mode":
            options.execution_mode = getattr(ort.ExecutionMode, value)
        else:
            setattr(options, key, value)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def _compare(path: Path, feeds: dict[str, np.ndarray], rounds: int, seconds: float) -> dict[str, float]:
    calls = {name: _session(path, knobs) for name, knobs in SETTINGS.items()}
    medians: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds):
        names = list(calls)[r % len(calls) :] + list(calls)[: r % len(calls)]
        for name in names:
            medians[name].append(_median_ms(calls[name], feeds, seconds))
    ms = {name: statistics.median(values) for name, values in medians.items()}
    return {name: round(ms["defaults"] / value, 3) for name, value in ms.items()} | {
        "defaults_ms": round(ms["defaults"], 3)
    }


def _median_ms(
    call: Callable[[dict[str, np.ndarray]], Any], feeds: dict[str, np.ndarray], seconds: float
) -> float:
    for _ in range(3):
        call(feeds)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        call(feeds)
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


if __name__ == "__main__":
    main()
