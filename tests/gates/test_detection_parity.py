"""Padded detections compared row for matching row: two runtimes that find the same
detections in another order (tied scores) agree; a missing or extra detection does not."""

from __future__ import annotations

import numpy as np

from deploy.gates import parity
from deploy.gates.detection_parity import DetectionLayout, aligned
from deploy.gates.references import Case
from deploy.gates.tolerance import Tolerance

LAYOUT = DetectionLayout("num_detections", ("boxes", "scores", "labels"))


def detections(rows: list[tuple[float, float, int]], k: int = 5) -> dict[str, np.ndarray]:
    """rows: (x, score, label); boxes [x, x, x + 10, x + 10]; zero-padded to k rows."""
    boxes = np.zeros((1, k, 4), np.float32)
    scores = np.zeros((1, k), np.float32)
    labels = np.zeros((1, k), np.int64)
    for i, (x, score, label) in enumerate(rows):
        boxes[0, i] = [x, x, x + 10, x + 10]
        scores[0, i], labels[0, i] = score, label
    return {"boxes": boxes, "scores": scores, "labels": labels, "num_detections": np.array([len(rows)])}


REFERENCE = detections([(5.0, 0.9, 1), (40.0, 0.9, 3), (80.0, 0.5, 2)])


def table(candidate: dict[str, np.ndarray]) -> parity.Table:
    return parity.compare({"opt": candidate}, {"opt": Case({}, REFERENCE)}, Tolerance(), LAYOUT)


def test_the_same_detections_in_another_order_agree() -> None:
    swapped = detections([(40.0, 0.9, 3), (5.0, 0.9, 1), (80.0, 0.5, 2)])  # a tie listed the other way
    assert not parity.failures(table(swapped), Tolerance())
    # Row by row, without the layout, the very same answer fails.
    plain = parity.compare({"opt": swapped}, {"opt": Case({}, REFERENCE)}, Tolerance())
    assert parity.failures(plain, Tolerance())
    again = aligned(REFERENCE, swapped, LAYOUT)
    np.testing.assert_array_equal(again["labels"], REFERENCE["labels"])


def test_a_missing_or_moved_detection_is_a_difference() -> None:
    missing = detections([(5.0, 0.9, 1), (40.0, 0.9, 3)])
    failed = parity.failures(table(missing), Tolerance())
    assert any(f.startswith("opt/num_detections") for f in failed) and any("opt/boxes" in f for f in failed)
    moved = detections([(5.0, 0.9, 1), (40.0, 0.9, 3), (90.0, 0.5, 2)])
    assert any(f.startswith("opt/boxes") for f in parity.failures(table(moved), Tolerance()))
