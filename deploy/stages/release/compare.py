"""A model's candidate and deployed versions on the same inputs, in one process: output
agreement per output, and time per request and per item side by side (new / deployed), interleaved round by round
until each ratio's confidence interval is narrow enough to decide on
(runtimes.interleaved)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploy.gates.metrics import (
    EXACT_KINDS,
    max_abs,
    row_cosines,
    row_norm_ratios,
    samples_equal,
    shared_infinities_zeroed,
    top1_agreement,
)
from deploy.runtimes.interleaved import Budget, measure
from deploy.serving.releases import Agreement, Comparison

if TYPE_CHECKING:
    from deploy.gates.decoder_gate import Stepper
    from deploy.spec.config import DeployConfig

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
    budget: Budget,
) -> Comparison:
    """`cases`: the inputs both versions answer; latency is timed on the first case, one
    sample of it where the model batches, throughput on the largest case, each interleaved
    until its interval is within `budget.precision` (runtimes.interleaved)."""
    from deploy.runtimes import contention
    from deploy.runtimes.onnxrt import OnnxRuntime

    fit = contention.fitted()  # both sides alike: the threads policy bench times with
    before = OnnxRuntime(old, threads=fit.threads, outputs=outputs)
    after = OnnxRuntime(new, threads=fit.threads, outputs=outputs)
    agreement = agree([before.infer(c) for c in cases], [after.infer(c) for c in cases], outputs)
    single, batch = cases[0], max(cases, key=_batch)
    start = contention.usage()
    latency = measure(lambda: before.infer(single), lambda: after.infer(single), budget)
    per_item = measure(lambda: before.infer(batch), lambda: after.infer(batch), budget)
    machine = fit.environment(start, contention.usage())
    return Comparison(
        against,
        inputs,
        agreement,
        round(latency.ratio, 4),
        round(per_item.ratio, 4),
        [round(latency.low, 4), round(latency.high, 4)],
        [round(per_item.low, 4), round(per_item.high, 4)],
        max(latency.rounds, per_item.rounds),
        fit.threads,
        machine.text() if machine else "",
    )


def agree(
    old: Sequence[Mapping[str, np.ndarray]], new: Sequence[Mapping[str, np.ndarray]], outputs: Sequence[str]
) -> list[Agreement]:
    """Per output, over every case: the worst sample's cosine, the largest |Δ|, and for a
    2-D output (a classifier's logits) the share of samples with the same argmax."""
    found = []
    for name in outputs:
        if np.asarray(old[0][name]).dtype.kind in EXACT_KINDS:
            found.append(_equal(name, [o[name] for o in old], [n[name] for n in new]))
            continue
        a = [np.asarray(o[name], dtype=np.float64) for o in old]
        b = [np.asarray(n[name], dtype=np.float64) for n in new]
        pairs = [shared_infinities_zeroed(x, y) for x, y in zip(a, b, strict=True)]  # masked logits
        cosines = np.concatenate([row_cosines(x, y) for x, y in pairs])
        largest = float(np.max([max_abs(x, y) for x, y in pairs]))
        top1 = _top1(a, b) if all(x.ndim == 2 for x in a) else None
        cosine = round(float(np.min(cosines)), 6)
        found.append(Agreement(name, cosine, float(f"{largest:.4g}"), top1, _scale(pairs)))
    return found


def _equal(name: str, old: Sequence[np.ndarray], new: Sequence[np.ndarray]) -> Agreement:
    """An integer or boolean output (labels, masks): a sample agrees when every element is
    equal (metrics.samples_equal), so the worst sample's `cosine` is 1 or 0, and it has no
    size to change."""
    same: list[bool] = []
    largest = 0.0
    for equal, delta in (samples_equal(x, y) for x, y in zip(old, new, strict=True)):
        same += equal.tolist() if delta is not None else [False]
        largest = max(largest, float(delta.max(initial=0.0)) if delta is not None else float("inf"))
    return Agreement(name, 1.0 if all(same) else 0.0, float(f"{largest:.4g}"), None, 1.0)


def _scale(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """The norm ratio (new / deployed) furthest from 1, by factor, over every sample."""
    ratios = np.concatenate([row_norm_ratios(x, y) for x, y in pairs])
    if np.isnan(ratios).any():
        return float("nan")
    with np.errstate(divide="ignore"):
        worst = ratios[int(np.argmax(np.abs(np.log(ratios))))] if ratios.size else 1.0
    return float(f"{worst:.6g}")


def _top1(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return round(top1_agreement(np.concatenate(a), np.concatenate(b)), 6)


def _batch(feeds: Feeds) -> int:
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if first.ndim else 1


def compare_decoder(
    old: Path,
    new: Path,
    prompts: Sequence[list[int]],
    steps: int,
    config: DeployConfig,
    against: int,
    inputs: str,
    budget: Budget,
) -> Comparison:
    """A decoder's versions by what they generate (gates/decoder_gate.py): the deployed one
    decodes each prompt greedily, the candidate is fed its tokens; one agreement, on the
    next token, whose cosine is the least step's. Timed interleaved: the prefill (time to
    first token) and one decode step after the first prompt (inter-token latency)."""
    from deploy.gates import decoder_gate
    from deploy.runtimes import contention
    from deploy.runtimes.onnxrt import OnnxRuntime

    assert config.model.decoder is not None
    fit = contention.fitted()
    names = [decoder_gate.LOGITS, *config.model.decoder.present_names()]
    before, after = (
        decoder_gate.stepper(config, OnnxRuntime(path, threads=fit.threads, outputs=names))
        for path in (old, new)
    )
    walked = decoder_gate.walks(before, after, [list(p) for p in prompts], steps)
    m = decoder_gate.measured(walked, 5)[decoder_gate.LOGITS]
    agreement = Agreement(
        "next token", round(m.min_sample_cosine or 0.0, 6), float(f"{m.max_abs:.4g}"), m.top1_agreement
    )
    prefill, decode = _step_feeds(before, prompts[0])
    start = contention.usage()
    first = measure(lambda: before.session.infer(prefill), lambda: after.session.infer(prefill), budget)
    then = measure(lambda: before.session.infer(decode), lambda: after.session.infer(decode), budget)
    machine = fit.environment(start, contention.usage())
    return Comparison(
        against, inputs, [agreement], round(first.ratio, 4), round(then.ratio, 4),
        [round(first.low, 4), round(first.high, 4)], [round(then.low, 4), round(then.high, 4)],
        max(first.rounds, then.rounds), fit.threads, machine.text() if machine else "", decoder=True,
    )  # fmt: skip


def _step_feeds(stepper: Stepper, prompt: list[int]) -> tuple[Feeds, Feeds]:
    """The prefill's feeds, and one decode step's after it (the deployed version's past)."""
    prefill = {"input_ids": np.asarray([prompt], np.int64), **stepper.empty}
    out = stepper.session.infer(prefill)
    token = int(np.argmax(out["logits"][0, -1]))
    past = {name: out[p] for name, p in zip(stepper.past, stepper.present)}
    return prefill, {"input_ids": np.array([[token]], np.int64), **past}
