"""One definition of each agreement metric: cosine, max |Δ|, top-1 and top-k agreement.
Every gate (parity, accuracy), smoke's service checks, the release comparison and NNCF's
fallback search compute them here, so `min_cosine` means one thing everywhere.

The convention, pinned by tests/gates/test_metrics.py:
- cosine is the *uncentred* cosine of the flattened vectors, in float64. A constant vector
  needs no special case (it has a direction); it is not Pearson's correlation.
- Two identical vectors agree fully: 1.0, all-zero pairs included (a ReLU output that is
  zero in both answers is the same answer).
- Exactly one all-zero vector shares no direction with the other: 0.0.
- Any NaN or infinity on either side: NaN, which fails every `>= min_cosine` comparison
  (an overflowed FP16 output must never pass). An infinity the reference itself holds
  (masked logits: -inf at padding) is matched by `shared_infinities_zeroed` before the
  metrics: the same infinity at the same place agrees, anything else there does not.
- Rows (`row_cosines`) follow the same rules per sample along dim 0.
Whether the *reference* is all zeros (a gate that compares nothing) is the caller's
question, asked with `all_zero`: the metric itself answers only how alike two answers are.
"""

from __future__ import annotations

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    x, y = _flat(a), _flat(b)
    if x.shape != y.shape:
        raise ValueError(f"cosine of shapes {list(np.shape(a))} and {list(np.shape(b))}")
    return float(row_cosines(x[None, :], y[None, :])[0])


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One cosine per sample (dim 0; a 0-d or 1-d array is one sample)."""
    x, y = _rows(a), _rows(b).reshape(_rows(a).shape)
    finite = np.all(np.isfinite(x), axis=1) & np.all(np.isfinite(y), axis=1)
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        plain = np.sum(x * y, axis=1) / np.where(norms > 0, norms, 1.0)
    same = np.all(x == y, axis=1)
    found = np.where(same, 1.0, np.where(norms > 0, plain, 0.0))
    return np.where(finite, np.clip(found, -1.0, 1.0), np.nan)


def row_norm_ratios(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One |b| / |a| per sample (dim 0): what cosine cannot see, a change of scale. 1.0
    where both are zero, inf where only `a` is; NaN where either is not finite."""
    x, y = _rows(a), _rows(b).reshape(_rows(a).shape)
    old, new = np.linalg.norm(x, axis=1), np.linalg.norm(y, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(old > 0, new / np.where(old > 0, old, 1.0), np.where(new > 0, np.inf, 1.0))
    return np.where(np.isfinite(old) & np.isfinite(new), ratio, np.nan)


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    """The largest absolute difference (0.0 for empty arrays; NaN where either has one)."""
    diff = np.abs(_flat(a) - _flat(b))
    return float(diff.max(initial=0.0)) if not np.isnan(diff).any() else float("nan")


def shared_infinities_zeroed(ref: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both in float64, with 0.0 where both hold the same infinity: what is left to compare
    numerically. An infinity on one side only stays, and fails every metric (NaN, inf)."""
    r, g = np.asarray(ref, dtype=np.float64), np.asarray(got, dtype=np.float64)
    if r.shape != g.shape:
        return r, g
    shared = np.isinf(r) & (r == g)
    return np.where(shared, 0.0, r), np.where(shared, 0.0, g)


# numpy's kinds of what is compared exactly, never by a cosine or a tolerance: booleans,
# signed and unsigned integers (argmax labels, masks, indices).
EXACT_KINDS = "biu"


def samples_equal(ref: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """How an output of EXACT_KINDS is compared: per sample (its first axis; a 0-d answer is
    one sample), whether every element is equal, and |Δ| per element in float64 (None where
    the shapes differ: no sample is equal then). A tolerance would pass an argmax off by one
    class, and a cosine of class indices read a label moved by two classes as 0.99."""
    r, g = np.atleast_1d(ref), np.atleast_1d(got)
    if r.shape != g.shape:
        return np.zeros(len(r), dtype=bool), None
    equal = np.all((r == g).reshape(len(r), int(np.prod(r.shape[1:]))), axis=1)  # -1: not at size 0
    return equal, np.abs(r.astype(np.float64) - g.astype(np.float64))


def all_zero(a: np.ndarray) -> bool:
    return not np.any(np.asarray(a))


def top1_agreement(ref: np.ndarray, got: np.ndarray) -> float:
    """The share of samples (rows of [batch, classes]) whose best class is the same."""
    return float(np.mean(np.argmax(ref, axis=1) == np.argmax(got, axis=1)))


def topk_agreement(ref: np.ndarray, got: np.ndarray, k: int) -> float:
    """The share of samples whose reference best class is among the candidate's k best."""
    best = np.argmax(ref, axis=1)
    top = np.argsort(-got, axis=1, kind="stable")[:, : min(k, got.shape[1])]
    return float(np.mean([b in row for b, row in zip(best, top, strict=True)]))


def _flat(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).ravel()


def _rows(a: np.ndarray) -> np.ndarray:
    array = np.asarray(a, dtype=np.float64)
    return array.reshape(1, -1) if array.ndim < 2 else array.reshape(array.shape[0], -1)
