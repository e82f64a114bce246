"""What the smoke stage found for each model, as typed records (smoke.json is
`SmokeReport`, versioned), and the verdicts drawn from them (partial, nothing tested,
required formats)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, NotRequired

from typing_extensions import TypedDict  # pydantic reads typing's TypedDict only from Python 3.12

from deploy.gates.parity_table import Table
from deploy.pipeline.graph.records import expect_schema, typed
from deploy.serving.layout import skip_reason

# smoke.json's layout; bumped with the smoke stage's version (see pipeline/graph/records.py).
SCHEMA = 3  # 3: concurrent clients' traffic per model (was: one burst's batching counts)


class ModelStatus(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # the server lacks the backend: nothing was tested


@dataclass
class ServiceCheck:
    """One ensemble's answers per protocol and how they compare with the reference."""

    kind: str  # classify / embedding / tensors
    samples: list[str]
    answers: dict[str, list[str]] = field(default_factory=dict)  # protocol -> one line per sample
    reference: list[str] = field(default_factory=list)
    top1_agreement: float | None = None
    min_cosine: float | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class Traffic:
    """What concurrent clients got back (smoke.json's `traffic` of a model)."""

    clients: int
    requests: int  # per round
    distinct: int  # distinct requests (golden's client requests)
    batches: list[int]  # their batch sizes
    rounds: int = 0
    executions: int = 0  # over the last round
    merged: bool = False
    merging_configured: bool = False
    mismatches: list[str] = field(default_factory=list)
    mismatch_count: int = 0
    alone: str = ""  # the wrong ones sent again alone: whether merging is the cause

    def batching_note(self) -> str:
        """Whether merged executions were seen: a fact, or the admission that it was not."""
        if not self.merging_configured:
            return "no dynamic batching: each request ran as sent"
        seen = f"{self.requests} requests in {self.executions} executions"
        if self.merged:
            return f"requests of different clients merged ({seen})"
        return f"dynamic batching was not exercised: {seen} after {self.rounds} bursts"

    def problems(self) -> list[str]:
        """The verdict and the first mismatches, for the stage's failure."""
        if not self.mismatch_count:
            return []
        judged = self.requests * self.rounds
        merged = " while the server merged requests of different clients" if self.merged else ""
        head = (
            f"{self.mismatch_count} of {judged} answers to concurrent clients differ from the reference for the "
            f"client's own request{merged}"
        )
        return [head, *([self.alone] if self.alone else []), *self.mismatches]

    def text(self) -> str:
        head = f"{self.clients} clients x {self.requests // max(self.clients, 1)} requests ({self.distinct} distinct, batch {'/'.join(map(str, sorted(set(self.batches))))})"
        verdict = (
            f"{self.mismatch_count} wrong" if self.mismatch_count else "all answers match their own reference"
        )
        return f"{head}: {verdict}; {self.batching_note()}"


@dataclass
class ModelResult:
    status: ModelStatus
    format: str = ""
    precision: str = ""
    backend: str = ""
    reason: str = ""  # why skipped
    reference: str = ""  # what the served outputs were compared with
    problems: list[str] = field(default_factory=list)
    protocols: dict[str, Table] = field(default_factory=dict)  # protocol -> parity table
    traffic: Traffic | None = None  # concurrent clients, each with its own requests
    service: ServiceCheck | None = None  # an ensemble: what real inputs got back
    role: str = "model"  # serving.service.Role: model, pre, post, ensemble

    @classmethod
    def of(cls, model: Any, status: ModelStatus, **fields: Any) -> ModelResult:
        """A result for `model`, its format, precision, backend and role as the repository says."""
        return cls(status, model.fmt, model.precision, model.backend, role=model.role.value, **fields)

    @classmethod
    def skipped(cls, model: Any, reason: str = "") -> ModelResult:
        return cls.of(model, ModelStatus.SKIPPED, reason=reason or skip_reason(model.backend))

    @classmethod
    def failed(cls, model: Any, problem: str) -> ModelResult:
        return cls.of(model, ModelStatus.FAILED, problems=[problem])

    def to_json(self) -> dict[str, object]:
        """The fields that apply: a skipped model has a reason, a tested one its numbers."""
        data: dict[str, object] = {
            "status": self.status.value,
            "format": self.format,
            "precision": self.precision,
            "role": self.role,
        }
        data.update(
            {
                k: v
                for k, v in (
                    ("backend", self.backend),
                    ("reason", self.reason),
                    ("reference", self.reference),
                )
                if v
            }
        )
        if self.status is not ModelStatus.SKIPPED:
            from deploy.gates.parity_table import to_json

            protocols = {p: to_json(t) for p, t in self.protocols.items()}
            data.update(problems=self.problems, protocols=protocols)
        if self.traffic is not None:
            data["traffic"] = asdict(self.traffic) | {"note": self.traffic.text()}
        if self.service is not None:
            data["service"] = asdict(self.service)
        return data


@dataclass(frozen=True)
class ServerInfo:
    """The server the models were checked on."""

    kind: str
    version: str | None
    http: str
    grpc: str
    backends: list[str] | None  # None: a server we did not start (its backends are unknown)
    notes: list[str] = field(default_factory=list)


@dataclass
class SmokeReport:
    """smoke.json: every model in the repository with its result, and the server."""

    models: dict[str, ModelResult] = field(default_factory=dict)
    server: ServerInfo | None = None

    def to_json(self) -> dict[str, object]:
        models = {name: r.to_json() for name, r in self.models.items()}
        server = asdict(self.server) if self.server is not None else None
        return {"schema": SCHEMA, "models": models, **({"server": server} if server else {})}

    @classmethod
    def read(cls, path: Path) -> SmokeReport:
        data = expect_schema(json.loads(path.read_text()), str(path), SCHEMA)
        found: _SmokeJson = typed(_SmokeJson, data, f"{path}: not a smoke report")
        return cls(found["models"], found.get("server"))


class _SmokeJson(TypedDict):
    """smoke.json's layout, checked field by field as it is read (a model's fields as
    ModelResult.to_json writes them: those that apply; traffic's `note` is derived)."""

    models: dict[str, ModelResult]
    server: NotRequired[ServerInfo | None]


def of(models: dict[str, ModelResult], status: ModelStatus) -> dict[str, ModelResult]:
    return {name: r for name, r in models.items() if r.status is status}


def partial(models: dict[str, ModelResult]) -> str | None:
    """e.g. "passed 2, skipped 3 (no onnxruntime, pytorch backend)"; None when nothing was skipped."""
    skipped = of(models, ModelStatus.SKIPPED)
    if not skipped:
        return None
    backends = ", ".join(sorted({r.backend or "?" for r in skipped.values()}))
    return f"passed {len(of(models, ModelStatus.PASSED))}, skipped {len(skipped)} (no {backends} backend)"


def required_problems(models: dict[str, ModelResult], require: tuple[str, ...]) -> list[str]:
    """smoke.require: a format whose models were skipped (or never made) fails the stage."""
    problems = [
        f"{m}: required format '{r.format}' was skipped: {r.reason}"
        for m, r in of(models, ModelStatus.SKIPPED).items()
        if r.format in require
    ]
    present = {r.format for r in models.values()}
    return problems + [
        f"required format '{f}' is not in the repository; add it to stages.triton_config.formats"
        for f in require
        if f not in present
    ]


def nothing_tested(models: dict[str, ModelResult]) -> str:
    """Why nothing ran, and the one-line fix."""
    lacking = {r.backend: m for m, r in of(models, ModelStatus.SKIPPED).items() if r.backend}
    if not lacking:
        return "no model could be smoke-tested: the repository has no models"
    missing = ", ".join(f"'{b}' backend (for {m})" for b, m in lacking.items())
    return (
        f"no model could be smoke-tested: the server has no {missing}. Fix: add `python` to "
        "stages.triton_config.formats (ONNX Runtime under the python backend, which every tritonserver has), "
        "or point smoke.server at a Triton that has those backends (kind: binary with path, or kind: docker with an "
        "NGC tritonserver image)"
    )
