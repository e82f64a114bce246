"""A model's candidate and deployed versions on the same inputs, in one process: output
agreement per output, and latency / throughput side by side, alternating old and new
within each round so a noisy machine slows both alike and the ratio holds."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploy.gates.metrics import max_abs, row_cosines, top1_agreement
from deploy.serving.releases import Agreement, Comparison

MODEL_FILE = "model.onnx"  # what the onnx and python-backend formats serve
Feeds = Mapping[str, np.ndarray]


def comparable(version_dir: Path) -> Path | None:
    """The ONNX file a version serves, where ONNX Runtime can run it here."""
    path = version_dir / MODEL_FILE
    return path if path.is_file() else None


def compare(
    old: Path,
    new: Path,
    cases: Sequence[Feeds],
    outputs: Sequence[str],
    against: int,
    inputs: str,
    rounds: int,
) -> Comparison:
    """`cases`: the inputs both versions answer; latency is timed on the first case, one
    sample of it where the model batches, throughput on the largest case."""
    from deploy.runtimes.onnxrt import OnnxRuntime

    before, after = OnnxRuntime(old, outputs=outputs), OnnxRuntime(new, outputs=outputs)
    agreement = agree([before.infer(c) for c in cases], [after.infer(c) for c in cases], outputs)
    single, batch = cases[0], max(cases, key=_batch)
    latency = ratio(lambda: before.infer(single), lambda: after.infer(single), rounds)
    per_batch = ratio(lambda: before.infer(batch), lambda: after.infer(batch), rounds)
    return Comparison(against, inputs, agreement, round(latency, 4), round(1 / per_batch, 4))


def agree(
    old: Sequence[Mapping[str, np.ndarray]], new: Sequence[Mapping[str, np.ndarray]], outputs: Sequence[str]
) -> list[Agreement]:
    """Per output, over every case: the worst sample's cosine, the largest |Δ|, and for a
    2-D output (a classifier's logits) the share of samples with the same argmax."""
    found = []
    for name in outputs:
        a = [np.asarray(o[name], dtype=np.float64) for o in old]
        b = [np.asarray(n[name], dtype=np.float64) for n in new]
        cosines = np.concatenate([row_cosines(x, y) for x, y in zip(a, b, strict=True)])
        largest = float(np.max([max_abs(x, y) for x, y in zip(a, b, strict=True)]))
        top1 = _top1(a, b) if all(x.ndim == 2 for x in a) else None
        found.append(Agreement(name, round(float(np.min(cosines)), 6), float(f"{largest:.4g}"), top1))
    return found


def _top1(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return round(top1_agreement(np.concatenate(a), np.concatenate(b)), 6)


def ratio(old: Callable[[], Any], new: Callable[[], Any], rounds: int, window_s: float = 0.1) -> float:
    """Median over rounds of new / old per-call time. Each round times old, new, new, old
    (ABBA): whatever the call before leaves behind (ONNX Runtime's threads spin on for a
    while after a run, on the same cores) weighs on each side once, so a model compared
    with itself measures 1.0, not the order."""
    old(), new()
    calls = max(1, int(window_s / max(_one(old), 1e-6)))
    ratios = []
    for _ in range(rounds):
        a1, b1, b2, a2 = (_window(f, calls) for f in (old, new, new, old))
        ratios.append((b1 + b2) / (a1 + a2))
    return statistics.median(ratios)


def _one(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _window(call: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def _batch(feeds: Feeds) -> int:
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if first.ndim else 1
