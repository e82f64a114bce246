"""gates.metrics: one convention for cosine, max |Δ| and top-k agreement, pinned here, and
every caller (parity, accuracy, smoke's services, release, NNCF's fallback, the FP16
fallback search) giving the same answer for the same pair."""

from __future__ import annotations

import numpy as np
import pytest

from deploy.gates import accuracy, metrics, parity
from deploy.gates.fallback import _error
from deploy.gates.tolerance import Tolerance
from deploy.spec.tensors import OutputKind
from deploy.stages.openvino_int8.quantizer import _cosine as nncf_cosine
from deploy.stages.release.compare import agree

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 5))
B = A + 0.3 * RNG.standard_normal((3, 5))
ZERO = np.zeros((3, 5))


def reference_cosine(a: np.ndarray, b: np.ndarray) -> float:
    x, y = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(x @ y / np.sqrt((x @ x) * (y @ y)))


def test_the_convention_for_zero_constant_and_non_finite_vectors() -> None:
    assert metrics.cosine(A, B) == pytest.approx(reference_cosine(A, B), abs=1e-12)
    assert metrics.cosine(ZERO, ZERO) == 1.0  # the same answer
    assert metrics.cosine(ZERO, A) == 0.0 and metrics.cosine(A, ZERO) == 0.0  # no shared direction
    constant = np.full(6, 2.5)
    assert metrics.cosine(constant, constant * 3) == pytest.approx(1.0)  # uncentred: defined
    assert metrics.cosine(constant, -constant) == pytest.approx(-1.0)
    bad = A.copy()
    bad[1, 2] = np.inf
    assert np.isnan(metrics.cosine(A, bad)) and np.isnan(metrics.cosine(bad, bad))
    assert not metrics.cosine(A, bad) >= 0.0  # fails every gate


def test_rows_follow_the_same_convention_per_sample() -> None:
    got = np.stack([A[0], np.zeros(5), A[2] * -1])
    ref = np.stack([A[0], np.zeros(5), A[2]])
    assert metrics.row_cosines(ref, got) == pytest.approx([1.0, 1.0, -1.0])
    assert metrics.row_cosines(ref, np.stack([A[0], A[1], A[2]]))[1] == 0.0


def test_top_k_agreement_against_a_hand_count() -> None:
    ref = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    got = np.array([[0.2, 0.7, 0.1], [0.1, 0.6, 0.3], [0.4, 0.5, 0.1]])
    assert metrics.top1_agreement(ref, got) == pytest.approx(1 / 3)
    # sample 1: class 0 is got's last of 3; sample 2: class 2 is got's last too
    assert metrics.topk_agreement(ref, got, 2) == pytest.approx(1 / 3)
    assert metrics.topk_agreement(ref, got, 3) == 1.0


@pytest.mark.parametrize(("ref", "got"), [(A, B), (A, ZERO), (A, -A)])
def test_every_gate_reports_the_same_cosine_for_the_same_pair(ref: np.ndarray, got: np.ndarray) -> None:
    want = metrics.cosine(ref, got)
    assert parity.metrics(got, ref, Tolerance()).cosine == pytest.approx(want)
    measured = accuracy.measure([{"o": ref}], [{"o": got}], 1, {"o": OutputKind.OTHER})
    assert measured["o"].cosine == pytest.approx(want)
    assert nncf_cosine([ref], [got]) == pytest.approx(want)
    assert 1.0 - _error(ref, got) == pytest.approx(want)
    # release reports the worst sample's cosine
    worst = min(metrics.cosine(r, g) for r, g in zip(ref, got, strict=True))
    assert agree([{"o": ref}], [{"o": got}], ["o"])[0].cosine == pytest.approx(worst, abs=1e-6)


def test_an_output_of_one_value_a_sample_is_gated_sample_by_sample() -> None:
    """A regression's [batch] output (Linear(4, 1).squeeze(-1)): the INT8 and OpenVINO
    gates raised IndexError on it, counting one row of all samples."""
    ref = np.array([0.5, -1.0, 2.0, 0.0])
    measured = accuracy.measure([{"y": ref}], [{"y": ref * 1.01}], 1, {"y": OutputKind.OTHER})["y"]
    assert measured.samples == 4 and measured.zero_samples == 1  # the 0.0 sample: nothing to compare
    assert measured.cosine == pytest.approx(1.0) and measured.min_sample_cosine == pytest.approx(1.0)
    assert measured.max_abs == pytest.approx(0.02)
    flipped = accuracy.measure([{"y": ref}], [{"y": -ref}], 1, {"y": OutputKind.OTHER})["y"]
    assert flipped.min_sample_cosine == pytest.approx(-1.0)


def test_a_gate_on_an_all_zero_reference_compares_nothing() -> None:
    """The metric calls zeros against zeros 1.0; the gates refuse to judge on them."""
    assert parity.metrics(ZERO, ZERO, Tolerance()).cosine is None
    measured = accuracy.measure([{"o": ZERO}], [{"o": ZERO}], 1, {"o": OutputKind.OTHER})
    assert measured["o"].cosine is None and measured["o"].zero_samples == 3


def test_an_infinity_the_reference_holds_agrees_only_with_the_same_infinity_there() -> None:
    """Masked logits (-inf at padding) are an answer: every gate matches the same infinity at
    the same place and compares the rest by value; any other answer there, or an infinity
    where the reference is finite (an FP16 overflow), fails."""
    ref = A.copy()
    ref[:, 3:] = -np.inf  # two masked positions per sample
    close = np.where(np.isinf(ref), ref, B)
    same_cosine = metrics.cosine(A[:, :3], B[:, :3])
    kinds = {"o": OutputKind.LOGITS}
    assert parity.metrics(close, ref, Tolerance()).cosine == pytest.approx(same_cosine)
    assert accuracy.measure([{"o": ref}], [{"o": close}], 1, kinds)["o"].cosine == pytest.approx(same_cosine)
    assert nncf_cosine([ref], [close]) == pytest.approx(same_cosine)
    assert 1.0 - _error(ref, close) == pytest.approx(same_cosine)
    exact = parity.metrics(ref.copy(), ref, Tolerance())
    assert exact.passed and exact.max_abs == 0.0
    assert agree([{"o": ref}], [{"o": ref.copy()}], ["o"])[0].cosine == 1.0
    unmasked = np.where(np.isinf(ref), -1e4, B)  # a large finite value where eager has -inf
    overflow = close.copy()
    overflow[0, 0] = np.inf  # an infinity where eager is finite
    flipped = -ref.copy()  # +inf where eager has -inf
    for wrong in (unmasked, overflow, flipped):
        found = parity.metrics(wrong, ref, Tolerance())
        assert not found.passed and not found.within_tolerance, found
        assert not accuracy.measure([{"o": ref}], [{"o": wrong}], 1, kinds)["o"].cosine >= 0.9
        assert _error(ref, wrong) > 0.1


def test_an_empty_answer_matched_by_an_empty_answer_passes_parity() -> None:
    """nonzero() where nothing is nonzero (a value edge: every input negative) answers [0, 2]:
    the same empty shape is the whole answer, not a reference that compares nothing."""
    empty = np.zeros((0, 2), dtype=np.int64)
    found = parity.metrics(empty.copy(), empty, Tolerance())
    assert found.passed and found.cosine == 1.0 and found.atol_bites, found
    assert not parity.metrics(np.zeros((1, 2), np.int64), empty, Tolerance()).passed
    assert not parity.metrics(
        np.zeros((1, 2)), np.zeros((1, 2)), Tolerance()
    ).passed  # all zero: nothing compared


def test_a_cosine_just_below_its_limit_reads_below_it() -> None:
    """min_cosine 1 against a cosine of 1 - 1e-11: the failure says the digits that differ."""
    got = A.copy()
    got[0, 0] += 1e-5  # within atol, a cosine a hair below 1
    tol = Tolerance(min_cosine=1.0)
    found = parity.metrics(got, A, tol)
    assert not found.passed and found.cosine is not None and found.cosine < 1.0
    said = parity._numbers(found, tol)
    value = said.removeprefix("cosine ").split(" <")[0]
    assert value != "1" and float(value) < 1.0 and said.endswith("< min_cosine 1"), said


def test_integer_and_boolean_outputs_are_compared_exactly() -> None:
    """argmax at batch 1 answered class 0: an all-zero reference, so export failed ("cosine
    undefined", then "float rounding: a tolerance of atol >= 0 passes it"). Labels, masks and
    indices are equal or wrong: no tolerance lets a class off by one pass."""
    for ref in (
        np.zeros(1, np.int64),
        np.array([3, 0, 7]),
        np.array([[True, False]]),
        np.arange(4, dtype=np.uint8),
    ):
        same = parity.metrics(ref.copy(), ref, Tolerance())
        assert same.passed and same.exact and same.cosine == 1.0, (ref, same)
    labels = np.array([3, 0, 7])
    near = parity.metrics(np.array([3, 0, 8]), labels, Tolerance(atol=2.0, rtol=1.0, min_cosine=0.9))
    assert not near.passed and near.max_abs == 1.0  # a tolerance that would pass floats does not apply
    assert parity.failures({"min": {"label": near}}, Tolerance()) == [
        "min/label: not equal (max|Δ| 1, mean |Δ| 0.333): an integer or boolean output is compared exactly"
    ]
    flipped = parity.metrics(np.array([[False, False]]), np.array([[True, False]]), Tolerance())
    assert not flipped.passed
    table = {
        "min": {
            "label": parity.metrics(labels.copy(), labels, Tolerance()),
            "logits": parity.metrics(A, A, Tolerance()),
        }
    }
    assert parity.headline(table, Tolerance()).endswith("min cos 1.000000; label compared exactly")


def test_the_reduced_precision_gate_judges_labels_by_equality_and_takes_0d_outputs() -> None:
    """INT8 moved one label of eight by two classes and the gate passed it (cosine 0.9926 of
    class indices); class 0 answered alike everywhere was refused (an all-zero reference);
    a 0-d output failed the stage with numpy's "zero-dimensional arrays cannot be concatenated"."""
    from deploy.gates.tolerance import AccuracyGate

    labels = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    moved = labels.copy()
    moved[5] = 7
    kinds = {"label": OutputKind.OTHER}
    found = accuracy.measure([{"label": labels}], [{"label": moved}], 5, kinds)["label"]
    assert found.exact_agreement == 0.875 and found.cosine is None and found.max_abs == 2.0
    assert accuracy.failures({"label": found}, AccuracyGate()) == [
        "label: 0.875 of samples answered exactly as FP32 < min_exact_agreement 0.99 (an integer or boolean output: equal or wrong)"
    ]
    zeros = np.zeros(8, np.int64)
    same = accuracy.measure([{"label": zeros}], [{"label": zeros.copy()}], 5, kinds)
    assert accuracy.failures(same, AccuracyGate()) == [] and same["label"].exact_agreement == 1.0
    scalars = accuracy.measure(
        [{"s": np.float32(v)} for v in (1.0, 2.0)],
        [{"s": np.float32(v)} for v in (1.0, 2.0)],
        5,
        {"s": OutputKind.OTHER},
    )
    assert scalars["s"].samples == 2 and scalars["s"].cosine == pytest.approx(1.0)
    assert agree([{"label": labels}], [{"label": moved}], ["label"])[0].cosine == 0.0
    assert agree([{"label": labels}], [{"label": labels.copy()}], ["label"])[0].cosine == 1.0


@pytest.mark.parametrize(
    ("ref", "got", "per_sample"),
    [
        (np.array([3, 0, 7]), np.array([3, 1, 7]), [True, False, True]),
        (np.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 5]]), [True, False]),
        (np.array(4), np.array(4), [True]),  # a 0-d answer is one sample
        (np.array([1, 2]), np.array([1, 2, 3]), [False, False]),  # another shape: nothing equal
        (np.zeros(0, np.int64), np.array([1]), []),  # nothing to compare, and still not equal
    ],
)
def test_integer_outputs_are_equal_per_sample_by_one_rule_in_every_caller(
    ref: np.ndarray, got: np.ndarray, per_sample: list[bool]
) -> None:
    """The smoke/export parity, the INT8/FP16 accuracy gate and a release's comparison read
    one rule (metrics.samples_equal): an output of another shape, even an empty one, is
    never "equal", in any of them."""
    from deploy.gates.tolerance import AccuracyGate

    equal, delta = metrics.samples_equal(ref, got)
    assert equal.tolist() == per_sample
    whole = delta is not None and all(per_sample)
    assert parity.metrics(got, ref, Tolerance()).passed is whole
    found = accuracy.measure([{"y": ref}], [{"y": got}], 5, {"y": OutputKind.OTHER})
    assert (accuracy.failures(found, AccuracyGate()) == []) is whole
    assert agree([{"y": ref}], [{"y": got}], ["y"])[0].cosine == (1.0 if whole else 0.0)


@pytest.mark.parametrize(("min_exact", "min_cosine"), [(0.99, 0.99), (0.8, 0.999), (1.0, 0.99), (0.9, 1.0)])
def test_nncfs_search_scores_labels_where_the_gate_judges_them(min_exact: float, min_cosine: float) -> None:
    """NNCF's accuracy control is steered by one number against 1 - max_drop (max_drop =
    1 - min_cosine); it read labels by a cosine, which passed a label moved by two classes.
    Now its score passes an integer output exactly where the INT8 gate passes it."""
    from deploy.gates.tolerance import AccuracyGate
    from deploy.stages.openvino_int8.quantizer import _score

    gate = AccuracyGate(min_exact_agreement=min_exact, min_cosine=min_cosine)
    labels = np.arange(40) % 7
    for wrong in (0, 1, 4, 8, 40):
        moved = labels.copy()
        moved[:wrong] += 2
        feeds = [labels[i : i + 8] for i in range(0, 40, 8)], [moved[i : i + 8] for i in range(0, 40, 8)]
        passes = (
            accuracy.failures(
                accuracy.measure([{"y": labels}], [{"y": moved}], 5, {"y": OutputKind.OTHER}), gate
            )
            == []
        )
        assert (_score(*feeds, gate) >= gate.min_cosine) is passes, (wrong, _score(*feeds, gate))
    assert _score([labels], [labels[:-1]], gate) == -1.0  # another shape
    floats = [A], [B]
    assert _score(*floats, gate) == nncf_cosine(*floats)  # a float output: the cosine, as before
