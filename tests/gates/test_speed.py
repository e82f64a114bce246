"""The reduced-precision stages' first look at speed (gates/accuracy.measure_speed): real
ONNX files in ONNX Runtime, timed in ABBA rounds with an interval, the machine measured
meanwhile. A file against itself sits at 1x; a file doing a quarter of the work is
faster by an interval that excludes 1; beside busy loops started by the test the line
calls nothing. Beside the suite's other workers a line may be unsettled or contended:
then it must say so, and that is what is checked."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploy.gates.accuracy import measure_speed
from deploy.gates.accuracy_report import Speed
from deploy.runtimes import contention
from tests.helpers import cpu_hogs

WIDTH = 384


def matmuls(path: Path, layers: int) -> Path:
    """x @ W, `layers` times over: the work scales with `layers`."""
    rng = np.random.default_rng(layers)
    weights = [
        numpy_helper.from_array((rng.normal(size=(WIDTH, WIDTH)) / WIDTH).astype(np.float32), f"w{i}")
        for i in range(layers)
    ]
    nodes = [
        helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"], [f"h{i + 1}"])
        for i in range(layers)
    ]
    nodes.append(helper.make_node("Identity", [f"h{layers}"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


FEED = {"x": np.random.default_rng(0).normal(size=(64, WIDTH)).astype(np.float32)}


def said(speed: Speed) -> str:
    """What the line must say when it may not call the speed."""
    return "not judged, CONTENDED" if speed.contended else "unsettled on the CPU"


def test_a_file_against_itself_reads_one(tmp_path: Path) -> None:
    fp32 = matmuls(tmp_path / "a.onnx", 8)
    speed = measure_speed(fp32, fp32, FEED)
    assert speed.rounds >= 6 and speed.calls >= 12, speed
    if not speed.judged():
        assert said(speed) in speed.text(), speed.text()
        return
    # Near 1 within the precision asked (±10 %); a 95 % interval from 6 rounds can miss 1 by
    # a hair (order effects between two sessions of one file), not by the precision.
    assert 0.9 <= speed.speedup <= 1.1 and speed.low <= 1.05 and speed.high >= 0.95, speed
    assert abs(speed.fp32_ms / speed.candidate_ms - 1) < 0.25, speed


def test_a_quarter_of_the_work_is_faster_by_an_interval_above_one(tmp_path: Path) -> None:
    speed = measure_speed(matmuls(tmp_path / "a.onnx", 16), matmuls(tmp_path / "b.onnx", 4), FEED)
    if not speed.judged():
        assert said(speed) in speed.text(), speed.text()
        return
    assert speed.low > 1.5, speed  # 4x the matmuls: well above 1.5x, whatever the overheads
    assert speed.low <= speed.speedup <= speed.high
    # The centre agrees with the sides' own medians (both from the same windows).
    assert speed.speedup == pytest.approx(speed.fp32_ms / speed.candidate_ms, rel=0.25)
    assert f"{speed.speedup:.2f}x FP32 speed on the CPU" in speed.text()


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc")
def test_beside_busy_loops_the_speed_is_not_judged(tmp_path: Path) -> None:
    fp32 = matmuls(tmp_path / "a.onnx", 16)
    with cpu_hogs(2 * contention.cores()):
        speed = measure_speed(fp32, matmuls(tmp_path / "b.onnx", 4), FEED)
    assert speed.contended and not speed.judged(), speed
    assert speed.text().startswith("speed vs FP32 not judged, CONTENDED: load "), speed.text()


@pytest.mark.parametrize(
    ("speed", "says"),
    [
        (
            Speed(2.0, 1.0, 40, rounds=8, low=1.9, high=2.1, stable=True),
            "2.00x FP32 speed on the CPU (1 ms vs 2 ms; ",
        ),
        (
            Speed(2.0, 1.0, 40, rounds=60, low=1.5, high=2.7, stable=False),
            "speed vs FP32 unsettled on the CPU (1 ms",
        ),
        (
            Speed(
                1.0,
                2.0,
                40,
                rounds=8,
                low=0.48,
                high=0.52,
                stable=True,
                machine="CONTENDED: load 7.0",
                contended=True,
            ),
            "speed vs FP32 not judged, CONTENDED: load 7.0 (2 ms vs 1 ms; ",
        ),
    ],
    ids=["settled", "unsettled", "contended"],
)
def test_each_state_is_said_and_a_gpu_precision_timed_on_the_cpu_says_so_in_every_one(
    speed: Speed, says: str
) -> None:
    assert speed.text().startswith(says), speed.text()
    on_gpu = Speed(**{**speed.__dict__, "target": "cuda"})
    assert on_gpu.text().startswith(says.split(" (")[0]), on_gpu.text()
    assert on_gpu.text().endswith("; a CPU timing of a GPU precision, not its verdict: bench on cuda is)"), (
        on_gpu.text()
    )
