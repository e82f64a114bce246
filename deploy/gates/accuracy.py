"""The accuracy gate for reduced precision: the INT8 / FP16 model against the FP32 model
on held-out inputs. Cosine and max-abs per output, and for outputs declared as class
scores (`kind: logits`) top-1 and top-k agreement (is FP32's class among the
low-precision model's k best?)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploy.domain.artifacts import ONNX
from deploy.gates.accuracy_report import Accuracy, AccuracyReport, Evidence, OutputAccuracy, Speed
from deploy.gates.metrics import (
    EXACT_KINDS,
    all_zero,
    cosine,
    max_abs,
    row_cosines,
    samples_equal,
    shared_infinities_zeroed,
    top1_agreement,
    topk_agreement,
)
from deploy.gates.tolerance import AccuracyGate
from deploy.pipeline.errors import StageFailed
from deploy.runtimes.base import Device, Session
from deploy.runtimes.interleaved import Budget
from deploy.spec.tensors import OutputKind, OutputSpec

if TYPE_CHECKING:
    from deploy.pipeline.graph.contract import StageContext


def measure(
    reference: list[dict[str, np.ndarray]],
    candidate: list[dict[str, np.ndarray]],
    k: int,
    kinds: Mapping[str, OutputKind],
) -> Accuracy:
    """output -> metrics over all samples."""
    result = {}
    for name in reference[0]:
        # A 0-d output (a model without a batch dim answering one number) is one sample a feed.
        ref = np.concatenate([np.atleast_1d(r[name]) for r in reference])
        got = np.concatenate([np.atleast_1d(c[name]) for c in candidate])
        if ref.dtype.kind in EXACT_KINDS:
            result[name] = _exact(ref, got)
            continue
        ref, got = ref.astype(np.float64), got.astype(np.float64)
        logits = kinds[name] is OutputKind.LOGITS and ref.ndim == 2 and ref.shape[1] >= 2
        result[name] = _metrics(ref, got, k if logits else None)
    return result


def _exact(ref: np.ndarray, got: np.ndarray) -> OutputAccuracy:
    """Labels, masks, indices: the share of samples answered exactly as FP32 did
    (metrics.samples_equal; a cosine refused class 0 answered alike everywhere)."""
    equal, diff = samples_equal(ref, got)
    scale = float(np.abs(ref.astype(np.float64)).max(initial=0.0))
    worst = float(diff.max(initial=0.0)) if diff is not None else float("inf")
    return OutputAccuracy(
        samples=len(ref),
        cosine=None,
        min_sample_cosine=None,
        zero_samples=0,
        max_abs=worst,
        mean_abs=float(diff.mean()) if diff is not None and diff.size else 0.0,
        scaled_err=worst / scale if scale > 0 else None,
        exact_agreement=0.0 if diff is None else float(equal.mean()) if len(equal) else 1.0,
    )


def _metrics(ref: np.ndarray, got: np.ndarray, k: int | None) -> OutputAccuracy:
    # The reference all zeros: the gate would compare nothing (random data through a ReLU),
    # so there is no cosine to judge, whatever the candidate answered. Top-1 / top-k read the
    # answers as given (-inf at a masked class ranks last); the numbers, what is left once
    # shared infinities are matched. One value a sample ([batch]: a regression, an argmax)
    # is a row of one, so the per-sample metrics count samples, not one row of them all.
    if ref.ndim == 1 and got.shape == ref.shape:
        ref, got = ref[:, None], got[:, None]
    finite_ref, finite_got = shared_infinities_zeroed(ref, got)
    per_sample = row_cosines(finite_ref, finite_got)
    zero = np.array([all_zero(r) for r in finite_ref], dtype=bool)
    with np.errstate(invalid="ignore"):
        diff = np.abs(finite_ref - finite_got)
    scale = float(np.abs(finite_ref).max(initial=0.0))
    return OutputAccuracy(
        samples=len(ref),
        cosine=None if zero.all() else cosine(finite_ref, finite_got),
        min_sample_cosine=float(np.min(per_sample[~zero])) if not zero.all() else None,
        zero_samples=int(zero.sum()),
        max_abs=max_abs(finite_ref, finite_got),
        mean_abs=float(diff.mean()),
        scaled_err=float(diff.max()) / scale if scale > 0 else None,
        # Top-1 and top-k agreement (is FP32's class among the candidate's k best?): logits only.
        top1_agreement=top1_agreement(ref, got) if k is not None else None,
        topk_agreement=topk_agreement(ref, got, k) if k is not None else None,
        top_k=k,
    )


def failures(metrics: Accuracy, gate: AccuracyGate) -> list[str]:
    bad = []
    for name, m in metrics.items():
        if m.exact_agreement is not None:
            if not m.exact_agreement >= gate.min_exact_agreement:
                bad.append(
                    f"{name}: {m.exact_agreement:.3f} of samples answered exactly as FP32 < min_exact_agreement "
                    f"{gate.min_exact_agreement} (an integer or boolean output: equal or wrong)"
                )
            continue
        if m.cosine is None:
            bad.append(
                f"{name}: cosine undefined, the outputs are all zeros on the held-out inputs (use real data)"
            )
        elif not m.cosine >= gate.min_cosine:  # also catches NaN from overflowed outputs
            bad.append(f"{name}: cosine {m.cosine:.5f} < min_cosine {gate.min_cosine}")
        if gate.max_abs is not None and not m.max_abs <= gate.max_abs:
            bad.append(f"{name}: max_abs {m.max_abs:.4g} > max_abs {gate.max_abs}")
        bad += _agreement(name, "top1_agreement", m.top1_agreement, gate.min_top1_agreement)
        bad += _agreement(name, f"top{gate.top_k}_agreement", m.topk_agreement, gate.min_topk_agreement)
    return bad


def _agreement(name: str, key: str, value: float | None, minimum: float | None) -> list[str]:
    if minimum is None:
        return []
    if value is None:
        return [
            f"{name}: {key} asked for, but the output is not declared `kind: logits` with shape [batch, classes]"
        ]
    return [f"{name}: {key} {value:.3f} < {minimum}"] if not value >= minimum else []


# (model file, output names) -> a runtime with infer(feeds) and timed(feeds)
Load = Callable[[Path, Sequence[str] | None], Session]


def onnx_runtime(path: Path, outputs: Sequence[str] | None = None) -> Session:
    from deploy.runtimes.onnxrt import OnnxRuntime

    return OnnxRuntime(path, outputs=outputs)


def gate_against_fp32(
    fp32: Path,
    candidate: Path,
    feeds: list[dict[str, np.ndarray]],
    outputs: Sequence[OutputSpec],
    gate: AccuracyGate,
    load: Load = onnx_runtime,
) -> tuple[Accuracy, list[str]]:
    """The FP32 ONNX in ONNX Runtime (the one reference every reduced precision is judged
    against) and the candidate, loaded by `load`, on the held-out feeds; (metrics, failures)."""
    names = [spec.name for spec in outputs]
    ref_model, cand_model = onnx_runtime(fp32, names), load(candidate, names)
    reference = [ref_model.infer(feed) for feed in feeds]
    got = [cand_model.infer(feed) for feed in feeds]
    metrics = measure(reference, got, gate.top_k, {spec.name: spec.kind for spec in outputs})
    return metrics, failures(metrics, gate)


def headline(label: str, metrics: Accuracy, evidence: Evidence) -> str:
    parts = []
    for name, m in metrics.items():
        if m.exact_agreement is not None:
            parts.append(f"{name}: {m.exact_agreement:.3f} of samples equal")
            continue
        agree = "" if m.top1_agreement is None else f", top-1 agree {m.top1_agreement:.3f}"
        parts.append(f"{name}: cos {_maybe(m.cosine, '.5f')}, max|Δ| {m.max_abs:.3g}{agree}")
    held_out = "RANDOM held-out inputs" if evidence.synthetic else "held-out"
    text = f"{label} vs FP32 on {held_out}: " + "; ".join(parts)
    return f"{text} ({evidence.label()})" if evidence.synthetic else text


def report_table(ctx: StageContext, label: str, metrics: Accuracy, samples: int, evidence: Evidence) -> None:
    """The run report's view of the gate: one row per output."""
    columns = [
        "output",
        "cosine",
        "min sample cosine",
        "max |Δ|",
        "max |Δ| / max |ref|",
        "mean |Δ|",
        "top-1 agreement",
        "top-k agreement",
    ]
    rows = [
        [
            name,
            _maybe(m.cosine, ".6f"),
            _maybe(m.min_sample_cosine, ".6f"),
            f"{m.max_abs:.4g}",
            _maybe(m.scaled_err, ".3g"),
            f"{m.mean_abs:.4g}",
            _maybe(m.top1_agreement, ".3f"),
            _maybe(m.topk_agreement, ".3f"),
        ]
        for name, m in metrics.items()
    ]
    what = "RANDOM held-out samples" if evidence.synthetic else "held-out samples"
    ctx.report_table(f"{label} vs FP32 on {samples} {what}", columns, rows, note=evidence.label())


def _maybe(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def conclude(
    ctx: StageContext,
    label: str,
    candidate: Path,
    feeds: list[dict[str, np.ndarray]],
    gate: AccuracyGate,
    details: Mapping[str, object],
    artifact: str,
    evidence: Evidence,
    load: Load = onnx_runtime,
    baseline: Path | None = None,
    target: Device = Device.CPU,
) -> None:
    """The reduced-precision stages' ending: gate `candidate` against the FP32 model,
    time both (is it faster at all?), record and write the report (accuracy.json,
    headline, report table), and fail the stage when the gate failed. `details`: what
    the stage adds to the report; `artifact`: the report's artifact name; `evidence`:
    what the held-out inputs were (random ones are said to be, everywhere); `load`: how
    the candidate runs; `baseline`: the FP32 model in the candidate's format, for the speed
    comparison (default: the FP32 ONNX); `target`: where the precision is meant to run
    (the speed line says when it was timed elsewhere)."""
    fp32 = ctx.input(ONNX)
    metrics, bad = gate_against_fp32(fp32, candidate, feeds, ctx.config.outputs, gate, load)
    speed = replace(measure_speed(baseline or fp32, candidate, feeds[0], load), target=target.value)
    report = AccuracyReport(metrics, len(feeds), gate.model_dump(mode="json"), speed, details, evidence)
    publish(ctx, label, report, artifact, bad)


def publish(ctx: StageContext, label: str, report: AccuracyReport, artifact: str, bad: list[str]) -> None:
    """Record and write the report (accuracy.json, headline, report table); fail the stage
    when the gate failed (`bad`: its reasons)."""
    ctx.record("accuracy", report.to_json())
    ctx.headline(f"{headline(label, report.outputs, report.evidence)}; {report.speed.text()}")
    report_table(ctx, label, report.outputs, report.holdout_samples, report.evidence)
    ctx.output(artifact).write_text(json.dumps(report.to_json(), indent=1))
    if bad:
        raise StageFailed(f"{label} accuracy gate failed: " + "; ".join(bad))


# The first look's budget: a ±10 % interval on the speed-up, or what 3 s of ABBA rounds
# give (said unsettled then); bench is the measurement.
SPEED_BUDGET = Budget(precision=0.10, min_rounds=6, max_rounds=60, max_s=3.0, window_s=0.05)


def measure_speed(
    fp32: Path,
    candidate: Path,
    feed: dict[str, np.ndarray],
    load: Load = onnx_runtime,
    baseline_load: Load | None = None,
) -> Speed:
    """`baseline_load`: how the FP32 side runs where it differs (the same IR computed in f32)."""
    from deploy.runtimes import contention, interleaved

    old = (baseline_load or load)(fp32, None).timed(feed).call
    new = load(candidate, None).timed(feed).call
    start = contention.usage()
    sides = interleaved.measure_sides(old, new, SPEED_BUDGET)
    machine = contention.Fit().environment(start, contention.usage())
    found = sides.interval.inverse()  # fp32 / candidate: the speed-up
    return Speed(
        1000 * sides.old_s,
        1000 * sides.new_s,
        sides.calls,
        rounds=found.rounds,
        low=found.low,
        high=found.high,
        stable=found.settled,
        machine=machine.text() if machine else "not measured (no /proc)",
        contended=bool(machine and machine.contended),
    )
