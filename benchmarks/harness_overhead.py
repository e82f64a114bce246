"""Overhead of the benchmark harness (stages/harness.py) against a bare timing loop of
the same ONNX Runtime session, on a model of ~1 ms per call.

    .venv/bin/python benchmarks/harness_overhead.py [--calls 2000] [--rounds 7]

Per round: N bare calls timed as a whole and N calls through `measure` (per-call
perf_counter_ns + list appends), in alternating order; reported: the median over rounds
of the per-call wall time of each, and the overhead (goal: <= 2 %).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from deploy.runtimes import harness


def model(path: Path, width: int = 512, layers: int = 4) -> None:
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(
            numpy_helper.from_array(
                rng.standard_normal((width, width)).astype(np.float32) / width**0.5, f"w{i}"
            )
        )
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"]))
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [64, width])],
        inits,
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built.ir_version = 8  # onnx writes the newest IR version; ONNX Runtime may not read it yet
    onnx.save(built, path)


def bare_loop(call: object, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        call()  # type: ignore[operator]
    return (time.perf_counter_ns() - start) / 1e6 / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlp.onnx"
        model(path)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = {"x": np.random.default_rng(1).standard_normal((64, 512)).astype(np.float32)}
        names = [o.name for o in sess.get_outputs()]

        def call() -> None:
            sess.run(names, feeds)

        for _ in range(200):
            call()
        bare: list[float] = []
        harness: list[float] = []
        for round_ in range(args.rounds):
            # Alternate which loop goes first: the second of two back-to-back loops on a
            # 2-core VM is measurably slower, whichever it is.
            for which in ("bare", "harness") if round_ % 2 == 0 else ("harness", "bare"):
                if which == "bare":
                    bare.append(bare_loop(call, args.calls))
                else:
                    timing = harness.measure(
                        call, harness.Settings(warmup_ms=0, duration_s=0, iterations=args.calls)
                    )
                    harness.append(timing.wall_s * 1e3 / len(timing.latencies_ms))
    b, h = statistics.median(bare), statistics.median(harness)
    per_call_us = bookkeeping_us()
    print("| loop | ms per call (median of rounds) |\n|---|---|")
    print(
        f"| bare `for` loop, ONNX Runtime | {b:.4f} |\n| harness (`stages/harness.measure`), ONNX Runtime | {h:.4f} |"
    )
    print(
        f"\nend to end: {100 * (h - b) / b:+.2f} % ({args.rounds} rounds x {args.calls} calls; run-to-run noise on this VM is a few %)"
    )
    print(
        f"harness bookkeeping on a no-op call: {per_call_us:.3f} us per call = {100 * per_call_us / (b * 1000):.3f} % of this model's call (goal <= 2 %)"
    )


def bookkeeping_us(calls: int = 200_000) -> float:
    """What the harness adds per call, isolated: a no-op timed both ways."""

    def noop() -> None:
        return None

    bare = statistics.median(bare_loop(noop, calls) for _ in range(5)) * 1000
    timed = []
    for _ in range(5):
        timing = harness.measure(noop, harness.Settings(warmup_ms=0, duration_s=0, iterations=calls))
        timed.append(timing.wall_s * 1e6 / len(timing.latencies_ms))
    return statistics.median(timed) - bare


if __name__ == "__main__":
    main()
