"""The parity arithmetic every gate relies on."""

from __future__ import annotations

import numpy as np
import pytest

from deploy.gates.parity import compare, gate, metrics
from deploy.gates.references import Case
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.errors import StageFailed


def test_metrics_values():
    ref = np.array([1.0, -2.0, 4.0], dtype=np.float32)
    got = ref + np.array([0.1, 0.0, -0.2], dtype=np.float32)
    m = metrics(got, ref, Tolerance(atol=0.15, rtol=0.0, min_cosine=0.99))
    assert m.max_abs == pytest.approx(0.2, rel=1e-5) and m.mean_abs == pytest.approx(0.1, rel=1e-5)
    assert m.max_rel == pytest.approx(0.1, rel=1e-4)
    assert not m.within_tolerance and not m.passed and m.cosine > 0.99
    assert metrics(got, ref, Tolerance(atol=0.0, rtol=0.11, min_cosine=0.99)).passed


def test_shape_mismatch_and_missing_outputs_fail():
    ref = {"opt": Case({}, {"y": np.zeros((2, 3)), "z": np.zeros(1)})}
    table = compare({"opt": {"y": np.zeros((3, 2))}}, ref, Tolerance())
    assert "shape [3, 2] != reference [2, 3]" in table["opt"]["y"].error
    assert table["opt"]["z"].error == "missing output"


def test_gate_names_the_broken_threshold():
    ref = {"opt": Case({}, {"y": np.array([1.0, 0.0])})}
    rotated = {"opt": {"y": np.array([0.9, 0.3])}}
    with pytest.raises(StageFailed, match=r"opt/y: .*cosine 0\.9\d+ < min_cosine 0\.99"):
        gate(
            "x",
            compare(rotated, ref, Tolerance(atol=1.0, rtol=0.0, min_cosine=0.99)),
            Tolerance(atol=1.0, rtol=0.0, min_cosine=0.99),
        )


def test_without_an_elementwise_bound_the_cosine_alone_gates():
    """atol: null (reduced precisions): an error that grows with the outputs' scale passes
    while the direction holds, and fails once the cosine drops."""
    from deploy.gates.parity import headline

    ref = np.linspace(-100.0, 100.0, 1000)
    close = ref + np.random.default_rng(0).normal(0, 0.5, ref.shape)  # |diff| up to ~2: no atol passes
    loose = Tolerance(atol=None, min_cosine=0.999)
    assert not metrics(close, ref, Tolerance()).passed
    assert metrics(close, ref, loose).passed
    assert not metrics(ref[::-1].copy(), ref, loose).passed  # another answer: cosine -1
    table = compare({"opt": {"y": close}}, {"opt": Case({}, {"y": ref})}, loose)
    assert "judged by cosine" in headline(table, loose)
