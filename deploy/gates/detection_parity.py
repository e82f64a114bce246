"""Parity on padded detections (model.detections): a comparison of valid rows, not of row
order. Two runtimes that find the same detections may list them in another order where
scores tie (NMS sorts by score; equal or saturated scores have no order), so before
outputs are compared the candidate's valid rows are matched to the reference's, one to
one, by their distance over every padded output; rows past the count are zeros in both
and compare as such. A different count, or a detection one side has and the other has
not, remains a difference. Numpy only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class DetectionLayout:
    """Which outputs are padded per image, and which holds each image's valid rows."""

    count: str
    padded: tuple[str, ...]


def layout_of(config: Any) -> DetectionLayout | None:
    """The layout a DeployConfig's model.detections declares (None: plain tensors)."""
    found = config.model.detections
    if found is None:
        return None
    return DetectionLayout(found.count, tuple(n for n in config.output_names() if n != found.count))


def aligned(reference: Arrays, candidate: Arrays, layout: DetectionLayout | None) -> dict[str, np.ndarray]:
    """`candidate` with its valid rows in the order of the reference's matching rows."""
    result = dict(candidate)
    if layout is None or not all(n in candidate for n in (*layout.padded, layout.count)):
        return result
    for image in range(len(reference[layout.count])):
        order = _matching(reference, candidate, layout, image)
        for name in layout.padded:
            rows = result[name][image].copy()
            rows[: len(order)] = candidate[name][image][order]
            result[name] = _with_image(result[name], image, rows)
    return result


def _with_image(batch: np.ndarray, image: int, rows: np.ndarray) -> np.ndarray:
    out = batch.copy()
    out[image] = rows
    return out


# The output holding each row's box (x1, y1, x2, y2): rows are matched by its overlap.
BOXES = "boxes"
MIN_IOU = 0.5


def _matching(reference: Arrays, candidate: Arrays, layout: DetectionLayout, image: int) -> np.ndarray:
    """For each of the reference's valid rows (while the candidate has rows left), the
    candidate's matching unmatched valid row: the one whose box overlaps it most (IoU at
    least MIN_IOU, like a detection benchmark) where there are boxes, else the nearest over
    every padded output; the rest in their own order. Masks, scores and labels are then
    compared on matched pairs."""
    n_ref = int(reference[layout.count][image])
    n_got = int(candidate[layout.count][image])
    if BOXES in layout.padded and reference[BOXES].shape[-1:] == (4,):
        distance = 1.0 - _iou(reference[BOXES][image][:n_ref], candidate[BOXES][image][:n_got])
        # Below MIN_IOU no overlap counts: the nearest over every output decides, after them.
        nearest = 2.0 + _distances(reference, candidate, layout, image, n_ref, n_got)
        distance = np.where(distance <= 1.0 - MIN_IOU, distance, nearest)
    else:
        distance = _distances(reference, candidate, layout, image, n_ref, n_got)
    taken: list[int] = []
    for row in range(min(n_ref, n_got)):
        free = [j for j in range(n_got) if j not in taken]
        taken.append(min(free, key=lambda j: (distance[row, j], j)))
    return np.array(taken + [j for j in range(n_got) if j not in taken], dtype=np.int64)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[len(a), len(b)] intersection over union of (x1, y1, x2, y2) boxes."""
    a, b = a.astype(np.float64)[:, None, :], b.astype(np.float64)[None, :, :]
    width = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    height = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = width * height
    union = _area(a) + _area(b) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _area(box: np.ndarray) -> np.ndarray:
    return np.clip(box[..., 2] - box[..., 0], 0, None) * np.clip(box[..., 3] - box[..., 1], 0, None)


def _distances(
    reference: Arrays, candidate: Arrays, layout: DetectionLayout, image: int, n_ref: int, n_got: int
) -> np.ndarray:
    """[n_ref, n_got]: the summed distance over every padded output, each scaled by its
    reference's largest magnitude (boxes in pixels and scores in [0, 1] weigh alike)."""
    total = np.zeros((n_ref, n_got))
    for name in layout.padded:
        ref = reference[name][image][:n_ref].reshape(n_ref, -1).astype(np.float64)
        got = candidate[name][image][:n_got].reshape(n_got, -1).astype(np.float64)
        scale = max(float(np.abs(ref).max(initial=0.0)), 1e-12)
        total += np.abs(ref[:, None, :] - got[None, :, :]).sum(axis=2) / scale
    return total
