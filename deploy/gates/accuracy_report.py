"""accuracy.json, the reduced-precision stages' report (quantize, fp16) as a versioned
record, and the numbers in it: per output against FP32 (`OutputAccuracy`) and the first
look at speed (`Speed`). Stdlib only: the select stage reads it without numpy."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from deploy.pipeline.graph.records import expect_schema, typed

# accuracy.json's layout (quantize's and fp16's report, read by select); bumped with
# those stages' versions (their keys), see pipeline/graph/records.py.
SCHEMA = 3  # 3: speed timed in ABBA rounds (interval, stable, machine); 2: the evidence (what the held-out inputs were)


@dataclass(frozen=True)
class OutputAccuracy:
    """One output of the candidate against FP32 over every held-out sample."""

    samples: int
    cosine: float | None  # over all samples at once; None: all zeros (no direction)
    min_sample_cosine: float | None
    zero_samples: int
    max_abs: float
    mean_abs: float
    scaled_err: float | None  # max_abs / max |ref|
    # Only for `kind: logits` outputs of shape [batch, classes].
    top1_agreement: float | None = None
    topk_agreement: float | None = None
    top_k: int | None = None
    # An integer or boolean output (labels, masks, indices): the share of samples whose every
    # element equals FP32's, in place of a cosine (which read class indices as a direction).
    exact_agreement: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Agreement keys only where measured, top-k named by its k (e.g. top5_agreement)."""
        data = asdict(self)
        for key in ("top1_agreement", "topk_agreement", "top_k", "exact_agreement"):
            if data[key] is None:
                del data[key]
        if self.top_k is not None:
            data[f"top{self.top_k}_agreement"] = data.pop("topk_agreement")
        return data


def _topk_back(data: Mapping[str, object]) -> dict[str, object]:
    """OutputAccuracy.to_json's top-k key (e.g. top5_agreement) back to its field."""
    fields = dict(data)
    k = fields.get("top_k")
    if k is not None:
        fields["topk_agreement"] = fields.pop(f"top{k}_agreement", None)
    return fields


Accuracy = dict[str, OutputAccuracy]


def to_json(metrics: Accuracy) -> dict[str, dict[str, Any]]:
    return {name: m.to_json() for name, m in metrics.items()}


DEVICE_NAMES = {"cpu": "CPU", "cuda": "GPU"}


@dataclass(frozen=True)
class Speed:
    """Median latency of one held-out sample, FP32 and candidate timed in alternation on
    `device` (a first look at whether the conversion pays; `bench` measures it). `target`
    is where the precision is deployed: FP16 is a GPU's precision, and a CPU timing of it
    is said to be one, never its verdict. The speed-up's 95 % interval comes from ABBA
    rounds (runtimes/interleaved.py); `stable` when it got as narrow as asked, `machine`
    what else ran meanwhile: an unstable or contended speed is shown, never called."""

    fp32_ms: float
    candidate_ms: float
    calls: int  # per side
    device: str = "cpu"  # where both were timed (a Device value)
    target: str = "cpu"  # where the precision is meant to run
    rounds: int = 0  # ABBA rounds (0: not timed in rounds)
    low: float = 0.0  # the speed-up's 95 % interval
    high: float = 0.0
    stable: bool = False
    machine: str = ""  # the window's environment, in words (runtimes/contention.Environment)
    contended: bool = False

    @property
    def speedup(self) -> float:
        if self.rounds and self.low > 0:
            return math.sqrt(self.low * self.high)  # the interval's centre (symmetric in log)
        return self.fp32_ms / self.candidate_ms if self.candidate_ms > 0 else 0.0

    def judged(self) -> bool:
        """Whether the speed-up may be called: a stable interval on a quiet machine."""
        return self.stable and not self.contended

    def text(self) -> str:
        numbers = f"{self.candidate_ms:.3g} ms vs {self.fp32_ms:.3g} ms"
        if self.rounds:
            numbers += f"; {self.speedup:.2f}x [{self.low:.2f}, {self.high:.2f}] in {self.rounds} ABBA rounds"
        on, meant = (DEVICE_NAMES.get(d, d) for d in (self.device, self.target))
        said = f"speed vs FP32 not judged, {self.machine}" if self.contended else self._said(on)
        if meant != on:
            return f"{said} ({numbers}; a {on} timing of a {meant} precision, not its verdict: bench on {self.target} is)"
        return f"{said} ({numbers})"

    def _said(self, on: str) -> str:
        if self.rounds and not self.stable:
            return f"speed vs FP32 unsettled on the {on}"
        return (
            f"SLOWER than FP32 on the {on}"
            if self.speedup < 1
            else f"{self.speedup:.2f}x FP32 speed on the {on}"
        )


@dataclass(frozen=True)
class Evidence:
    """What the held-out inputs an accuracy was measured on are: random numbers prove the
    conversion's mechanics, not that the model still answers right on real inputs."""

    synthetic: bool
    source: str  # "random (seed 1234)", "images in data/val"
    key: str  # the config key that takes real data

    def label(self) -> str:
        """For the console line, the report and select's table."""
        if self.synthetic:
            return f"measured on {self.source}, not real data: give real inputs in {self.key}"
        return f"measured on {self.source}"

    def short(self) -> str:
        return f"random data; real data goes in {self.key}" if self.synthetic else ""


@dataclass(frozen=True)
class AccuracyReport:
    """accuracy.json: the reduced-precision model against FP32 on held-out data."""

    outputs: dict[str, OutputAccuracy]
    holdout_samples: int
    gate: Mapping[str, object]  # the thresholds applied (AccuracyGate, as JSON)
    speed: Speed
    details: Mapping[str, object]  # what the converting stage adds: recipe, exclusions, fallback
    evidence: Evidence

    def to_json(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            **self.details,
            "evidence": asdict(self.evidence) | {"label": self.evidence.label()},
            "holdout_samples": self.holdout_samples,
            "outputs": to_json(self.outputs),
            "gate": dict(self.gate),
            "speed": asdict(self.speed) | {"speedup": self.speed.speedup},
        }

    @classmethod
    def read(cls, path: Path) -> AccuracyReport:
        what = f"{path}: not an accuracy report"
        data = dict(expect_schema(json.loads(path.read_text()), str(path), SCHEMA))
        known: _AccuracyJson = typed(_AccuracyJson, data, what)
        details = {k: v for k, v in data.items() if k not in _AccuracyJson.__annotations__ and k != "schema"}
        outputs = {n: typed(OutputAccuracy, _topk_back(m), what) for n, m in known["outputs"].items()}
        return cls(
            outputs, known["holdout_samples"], known["gate"], known["speed"], details, known["evidence"]
        )

    def worst_cosine(self) -> float | None:
        """The lowest output cosine to FP32 (None when no output has a direction)."""
        found = [m.cosine for m in self.outputs.values() if m.cosine is not None]
        return min(found) if found else None


class _AccuracyJson(TypedDict):
    """accuracy.json's fixed keys, checked field by field as it is read; every other key
    is the converting stage's details (speed's `speedup`, evidence's `label`: derived,
    ignored)."""

    outputs: dict[str, dict[str, object]]
    holdout_samples: int
    gate: dict[str, object]
    speed: Speed
    evidence: Evidence
