"""The gate for a reduced-precision decoder (config `model.decoder`; thresholds in
gates/tolerance.DecoderGate). On each held-out prompt the FP32 step decodes greedily,
prefill first; the candidate runs the same steps fed FP32's tokens (teacher forced), so
step i of both sees the same context and one early slip cannot hide every later step.
Judged: next-token agreement (is the candidate's argmax FP32's token?) and each step's
logits cosine. The result is the accuracy.json every reduced precision writes, with the
output `logits` holding one row per step, so select and release read a decoder's gate
as they read any other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploy.domain.artifacts import ONNX
from deploy.gates.accuracy_report import Accuracy, AccuracyReport, Evidence
from deploy.gates.generations import random_prompts
from deploy.gates.tolerance import DecoderGate, read_prompts
from deploy.pipeline.errors import StageFailed
from deploy.runtimes.base import Device, Session
from deploy.spec.tensors import OutputKind

if TYPE_CHECKING:
    from deploy.gates.accuracy import Load
    from deploy.pipeline.graph.contract import StageContext
    from deploy.spec.config import DeployConfig

LOGITS = "logits"
RANDOM_SEED = 4321


@dataclass(frozen=True)
class Walk:
    """One prompt's steps: the last position's logits at each, and FP32's greedy tokens."""

    reference: list[np.ndarray]
    candidate: list[np.ndarray]
    tokens: list[int]

    def first_slip(self) -> int | None:
        """The first step whose argmax differs from FP32's token, or None."""
        return next(
            (i for i, row in enumerate(self.candidate) if int(np.argmax(row)) != self.tokens[i]), None
        )


class Stepper:
    """Runs one step graph the way the generate loop does: input_ids and the past by name in,
    logits and the present out (serving/decode_loop.py's contract)."""

    def __init__(self, session: Session, past: list[str], present: list[str], empty: dict[str, np.ndarray]):
        self.session, self.past, self.present, self.empty = session, past, present, empty

    def walk(
        self, prompt: list[int], tokens: list[int] | None, steps: int
    ) -> tuple[list[np.ndarray], list[int]]:
        """Logits rows after the prompt and after each next token: `tokens` fed when given
        (teacher forced), else this model's own greedy choice."""
        feeds = {"input_ids": np.asarray([prompt], np.int64), **self.empty}
        rows: list[np.ndarray] = []
        chosen: list[int] = []
        for i in range(steps):
            out = self.session.infer(feeds)
            rows.append(np.asarray(out[LOGITS], np.float64)[0, -1])
            chosen.append(int(np.argmax(rows[-1])) if tokens is None else tokens[i])
            past = {name: out[p] for name, p in zip(self.past, self.present)}
            feeds = {"input_ids": np.array([[chosen[-1]]], np.int64), **past}
        return rows, chosen


def stepper(config: DeployConfig, session: Session) -> Stepper:
    decoder, key = config.model.decoder, config.inputs[1]
    assert decoder is not None
    # An empty past, as decode_loop.CacheShape.empty makes it (serving imports gates: not
    # called from here). key: past_key_values.0.key, [batch, heads, past, head_dim].
    empty = {n: np.zeros((1, key.opt[1], 0, key.opt[3]), key.dtype) for n in decoder.past_names()}
    return Stepper(session, decoder.past_names(), decoder.present_names(), empty)


def prompts(config: DeployConfig, gate: DecoderGate) -> tuple[list[list[int]], Evidence]:
    """The held-out prompts the gate is given, else random ids from input_ids' value range."""
    ids = config.inputs[0]
    if gate.prompts is not None:
        found = read_prompts(gate.prompts)
        _fits(found, ids.max[1], gate.prompts)
        _in_range(found, ids.value_range, gate.prompts)
        return found, Evidence(False, f"{len(found)} prompts from {gate.prompts}", "gate.decoder.prompts")
    found = random_prompts(config, np.random.default_rng(RANDOM_SEED))
    source = f"{len(found)} prompts of random token ids (seed {RANDOM_SEED})"
    return found, Evidence(True, source, "gate.decoder.prompts (a JSON list of token-id lists)")


def _fits(found: list[list[int]], longest: int, path: Path) -> None:
    over = [i for i, p in enumerate(found) if len(p) > longest]
    if over:
        raise StageFailed(
            f"{path}: prompt {over[0]} has {len(found[over[0]])} tokens, more than input_ids' "
            f"declared max of {longest}: shorten it or raise inputs[0].max"
        )


def _in_range(found: list[list[int]], bounds: tuple[float, float] | None, path: Path) -> None:
    """An id past the vocabulary would make the graph's Gather fail (or wrap): said by name."""
    if bounds is None:
        return
    low, high = bounds
    bad = next(((i, t) for i, p in enumerate(found) for t in p if not low <= t <= high), None)
    if bad is not None:
        raise StageFailed(
            f"{path}: prompt {bad[0]} has token id {bad[1]}, outside input_ids' value_range [{low:g}, {high:g}]"
        )


def walks(reference: Stepper, candidate: Stepper, found: list[list[int]], steps: int) -> list[Walk]:
    out = []
    for prompt in found:
        ref_rows, tokens = reference.walk(prompt, None, steps)
        got_rows, _ = candidate.walk(prompt, tokens, steps)
        out.append(Walk(ref_rows, got_rows, tokens))
    return out


def measured(found: list[Walk], top_k: int) -> Accuracy:
    """Every step of every prompt as one row of the output `logits`."""
    from deploy.gates.accuracy import measure

    ref = np.stack([row for w in found for row in w.reference])
    got = np.stack([row for w in found for row in w.candidate])
    return measure([{LOGITS: ref}], [{LOGITS: got}], top_k, {LOGITS: OutputKind.LOGITS})


def failures(metrics: Accuracy, gate: DecoderGate) -> list[str]:
    m = metrics[LOGITS]
    bad = []
    if not (m.top1_agreement or 0.0) >= gate.min_agreement:  # NaN logits agree with nothing
        bad.append(f"next-token agreement {m.top1_agreement:.3f} < min_agreement {gate.min_agreement}")
    if m.min_sample_cosine is None or not m.min_sample_cosine >= gate.min_step_cosine:
        bad.append(f"least step cosine {m.min_sample_cosine} < min_step_cosine {gate.min_step_cosine}")
    return bad


def conclude(
    ctx: StageContext,
    label: str,
    candidate: Path,
    gate: DecoderGate,
    details: Mapping[str, object],
    artifact: str,
    load: Load | None = None,
    target: Device = Device.CPU,
    baseline: Path | None = None,
) -> None:
    """A reduced-precision stage's ending for a decoder: gate, time, report, and fail the
    stage when the gate failed (gates/accuracy.py's conclude, judged by generation).
    `baseline`: the FP32 model in the candidate's format, for the speed line."""
    from deploy.gates import accuracy

    load = load or accuracy.onnx_runtime
    names = [LOGITS, *_present(ctx.config)]
    reference = stepper(ctx.config, accuracy.onnx_runtime(ctx.input(ONNX), names))
    found, evidence = prompts(ctx.config, gate)
    done = walks(reference, stepper(ctx.config, load(candidate, names)), found, gate.new_tokens)
    metrics = measured(done, 5)
    first = {"input_ids": np.asarray([found[0]], np.int64), **reference.empty}
    speed = accuracy.measure_speed(baseline or ctx.input(ONNX), candidate, first, load)
    steps = sum(len(w.tokens) for w in done)
    slips = [{"prompt": len(found[i]), "first_slip": w.first_slip()} for i, w in enumerate(done)]
    extra = {"decoder_gate": {"prompts": len(found), "steps": steps, "slips": slips}}
    report = AccuracyReport(
        metrics,
        steps,
        gate.model_dump(mode="json"),
        replace(speed, target=target.value),
        {**details, **extra},
        evidence,
    )
    accuracy.publish(ctx, f"{label} decoder, per step,", report, artifact, failures(metrics, gate))


def _present(config: DeployConfig) -> list[str]:
    assert config.model.decoder is not None
    return config.model.decoder.present_names()
