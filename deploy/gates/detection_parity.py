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


def _matching(reference: Arrays, candidate: Arrays, layout: DetectionLayout, image: int) -> np.ndarray:
    """For each of the reference's valid rows (while the candidate has rows left), the
    candidate's nearest unmatched valid row; the rest in their own order."""
    n_ref = int(reference[layout.count][image])
    n_got = int(candidate[layout.count][image])
    distance = _distances(reference, candidate, layout, image, n_ref, n_got)
    taken: list[int] = []
    for row in range(min(n_ref, n_got)):
        free = [j for j in range(n_got) if j not in taken]
        taken.append(min(free, key=lambda j: (distance[row, j], j)))
    return np.array(taken + [j for j in range(n_got) if j not in taken], dtype=np.int64)


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
