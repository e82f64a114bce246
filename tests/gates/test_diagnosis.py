"""A failed parity check names its measured cause. "Loosen the tolerance" only where the
difference was shown to be float rounding (of the size of eager's own float32-vs-float64
difference, from a runtime that agrees with itself); a real ONNX Runtime session on a graph
that draws noise disagrees with itself and is named as such, its spread beside the
tolerance; a difference only at sampled shapes or value edges is a frozen graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from deploy.gates import diagnosis, parity
from deploy.gates.eager_record import EagerRecord, Rounding
from deploy.gates.references import Case
from deploy.gates.tolerance import Tolerance
from deploy.runtimes.onnxrt import OnnxRuntime

TOL = Tolerance(atol=1e-4, rtol=1e-3, min_cosine=0.9999)


def golden(rng: np.random.Generator, names: tuple[str, ...] = ("min", "opt", "max")) -> dict[str, Case]:
    found = {}
    for name in names:
        x = rng.normal(size=(4, 8)).astype(np.float32)
        found[name] = Case({"x": x}, {"y": x * 10})
    return found


def record(scale: float, names: tuple[str, ...]) -> EagerRecord:
    return EagerRecord({}, {"y": 0.0}, {n: {"y": Rounding(scale, scale / 30)} for n in names})


def test_a_difference_of_the_size_of_rounding_is_said_to_be_rounding() -> None:
    cases = golden(np.random.default_rng(0))
    answers = {n: {"y": c.outputs["y"] + np.float32(3e-4)} for n, c in cases.items()}
    table = parity.compare(answers, cases, TOL)
    found = diagnosis.explain(table, TOL, record(1e-5, tuple(cases)), {n: {"y": 0.0} for n in cases})
    assert found.rounding and found.cause.startswith("float rounding") and "atol ≥ 0.0003" in found.cause


def test_the_gate_names_the_key_where_its_tolerance_is_set_when_rounding_is_the_cause(tmp_path: Path) -> None:
    """An FP16 decoder failed export on rounding: "a tolerance of atol ≥ 0.00037 passes it"
    named no key, and each stage keeps its tolerance at its own (stages.validate.atol, not
    stages.validate.tolerance, which is refused as unknown)."""
    import json

    import pytest

    from deploy.pipeline.errors import StageFailed

    cases = golden(np.random.default_rng(0))
    answers = {n: {"y": c.outputs["y"] + np.float32(3e-4)} for n, c in cases.items()}
    table = parity.compare(answers, cases, TOL)
    eager = tmp_path / "eager.json"
    eager.write_text(json.dumps(record(1e-5, tuple(cases)).to_json()))

    def same(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # a runtime that agrees with itself
        return {"y": feeds["x"] * 10 + np.float32(3e-4)}

    with pytest.raises(
        StageFailed, match=r"atol ≥ 0\.0003 .*passes it .*\(set at stages\.export\.tolerance\)"
    ):
        diagnosis.judge("ONNX Runtime vs eager", table, TOL, cases, eager, same, "stages.export.tolerance")
    far = {n: {"y": c.outputs["y"] * 1.01} for n, c in cases.items()}
    with pytest.raises(StageFailed) as refused:  # not rounding: no key to loosen is offered
        diagnosis.judge(
            "x", parity.compare(far, cases, TOL), TOL, cases, eager, None, "stages.export.tolerance"
        )
    assert "set at" not in str(refused.value)


def test_a_difference_far_past_rounding_is_not_called_float_noise() -> None:
    cases = golden(np.random.default_rng(1))
    answers = {n: {"y": c.outputs["y"] * 1.01} for n, c in cases.items()}
    table = parity.compare(answers, cases, TOL)
    found = diagnosis.explain(table, TOL, record(1e-6, tuple(cases)), {n: {"y": 0.0} for n in cases})
    assert not found.rounding and found.cause.startswith("not float rounding")
    assert "loosen" not in found.cause.replace("loosening the tolerance would hide it", "")


def test_a_difference_only_off_the_three_points_is_a_frozen_graph() -> None:
    cases = golden(np.random.default_rng(2), ("min", "opt", "max", "sample1", "low"))
    answers = {n: {"y": c.outputs["y"] * (1.5 if n in ("sample1", "low") else 1.0)} for n, c in cases.items()}
    table = parity.compare(answers, cases, TOL)
    shapes = EagerRecord({"sample1": {"x": [4, 8]}}, {"y": 0.0})
    found = diagnosis.explain(table, TOL, shapes, {})
    assert "fails at the sampled shape(s) sample1 (x [4, 8]) but passes at min / opt / max" in found.cause
    assert "value edge(s) low" in found.cause and "branch on the data was frozen" in found.cause


def noisy_graph(path: Path) -> Path:
    """y = x + 0.01 * U(0, 1): a graph whose answers differ run to run (RandomUniformLike)."""
    noise = helper.make_node("RandomUniformLike", ["x"], ["u"], low=0.0, high=1.0)
    scale = helper.make_node("Mul", ["u", "k"], ["scaled"])
    add = helper.make_node("Add", ["x", "scaled"], ["y"])
    graph = helper.make_graph(
        [noise, scale, add],
        "noisy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor("k", TensorProto.FLOAT, [], [0.01])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def test_a_runtime_that_disagrees_with_itself_is_named_with_its_spread(tmp_path: Path) -> None:
    runtime = OnnxRuntime(noisy_graph(tmp_path / "noisy.onnx"), outputs=["y"])
    rng = np.random.default_rng(3)
    cases = {
        n: Case({"x": x}, {"y": x})
        for n in ("min", "opt", "max")
        for x in [rng.normal(size=(2, 8)).astype(np.float32)]
    }
    answers = {n: runtime.infer(c.inputs) for n, c in cases.items()}
    table = parity.compare(answers, cases, TOL)
    spread = diagnosis.self_spread(runtime.infer, {n: c.inputs for n, c in cases.items()})
    assert all(0 < s["y"] <= 0.01 for s in spread.values())
    found = diagnosis.explain(table, TOL, record(1e-7, tuple(cases)), spread)
    assert found.cause.startswith("the runtime disagrees with itself") and not found.rounding
    assert "across 5 runs, tolerance ≈" in found.cause and "float" not in found.cause.split("(")[0]


def test_judge_raises_with_the_cause_first(tmp_path: Path) -> None:
    import pytest

    from deploy.pipeline.errors import StageFailed

    runtime = OnnxRuntime(noisy_graph(tmp_path / "noisy.onnx"), outputs=["y"])
    x = np.random.default_rng(4).normal(size=(2, 8)).astype(np.float32)
    cases = {"opt": Case({"x": x}, {"y": x})}
    table = parity.compare({"opt": runtime.infer({"x": x})}, cases, TOL)
    with pytest.raises(
        StageFailed, match=r"^noisy vs eager parity failed: the runtime disagrees with itself"
    ):
        diagnosis.judge("noisy vs eager", table, TOL, cases, None, runtime.infer)


def test_an_integer_output_that_differs_is_never_advised_a_tolerance() -> None:
    """`(y * 1e6).long()` moved by 1 where float rounding moved y: the diagnosis said "float
    rounding: a tolerance of atol >= 1 passes it", and with that tolerance set the same failure
    came back, since an integer output is compared exactly."""
    rng = np.random.default_rng(0)
    cases = {
        n: Case({"x": x}, {"y": (x * 1e6).astype(np.int64)})
        for n in ("min", "opt")
        for x in [rng.normal(size=(4, 8))]
    }
    answers = {n: {"y": c.outputs["y"] + 1} for n, c in cases.items()}
    table = parity.compare(answers, cases, TOL)
    found = diagnosis.explain(table, TOL, record(10.0, tuple(cases)), {n: {"y": 0.0} for n in cases})
    assert not found.rounding and "atol" not in found.cause
    assert found.cause.startswith("y is an integer or boolean output and differs at min (by up to 1)")
    assert "no tolerance applies" in found.cause
