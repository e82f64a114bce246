"""The service check: real bytes through each published ensemble, compared with the
same pre/post-processing done in Python around the eager model.

Images (scikit-learn's bundled photos as JPEG and PNG, or a directory the config names)
or sentences go to the ensemble over each protocol in one batched request, and concurrent
clients send their own; every answer is compared with what service_reference.py computes
for that request in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploy.domain.vocabulary import Precision, Protocol
from deploy.gates.detection_parity import Arrays
from deploy.gates.metrics import cosine, shared_infinities_zeroed
from deploy.pipeline.graph.contract import StageContext
from deploy.serving.repository import Model
from deploy.serving.service import AnswerKind, Role
from deploy.serving.service_client import Sample, input_name, pre_of, record, samples
from deploy.serving.service_record import (
    ClassifyRecord,
    EmbeddingRecord,
    EnsembleRecord,
    PostRecord,
    PreRecord,
)
from deploy.serving.smoke_report import ModelResult, ModelStatus, ServiceCheck
from deploy.stages.smoke.model_check import reference_name
from deploy.stages.smoke.params import SmokeParams
from deploy.stages.smoke.service_reference import References, postprocess

if TYPE_CHECKING:
    from deploy.serving.launch import Served
    from deploy.serving.requests import Client
    from deploy.serving.service_client import Answer
    from deploy.serving.smoke_report import Traffic
    from deploy.stages.smoke.traffic import TrafficServer


def _local_file(model: Model) -> Path | None:
    """A reduced-precision model is run locally from the very file served (its accuracy
    against FP32 is the quantize / fp16 stages' gate); FP32 answers to the eager model."""
    from deploy.runtimes.files import newest_model_file

    return None if model.precision == Precision.FP32 else newest_model_file(model.directory)


@dataclass(frozen=True)
class Gate:
    min_top1_agreement: float
    min_cosine: float


@dataclass(frozen=True)
class Service:
    """One published ensemble as the checks need it: its parts' settings and where the
    reference runs (the eager model, or ONNX Runtime on the served reduced-precision file)."""

    name: str
    pre: PreRecord
    pre_dir: Path
    post: PostRecord | None
    labels: list[str] | None
    served: Model
    local: Path | None

    @classmethod
    def of(cls, name: str, found: dict[str, Model]) -> Service:
        wiring = record(found[name])
        assert isinstance(wiring, EnsembleRecord) and wiring.pre is not None  # a service's ensemble
        pre_model, post_model = found[wiring.pre], found[wiring.post] if wiring.post else None
        post = record(post_model) if post_model else None
        assert post is None or isinstance(post, ClassifyRecord | EmbeddingRecord)
        served = found[wiring.model]
        labels = _labels(post, post_model)
        return cls(
            name, pre_of(found, name), _version_dir(pre_model), post, labels, served, _local_file(served)
        )

    def expected(self, refs: References, items: list[Sample]) -> dict[str, np.ndarray]:
        """What the service must answer for `items` sent as one request."""
        outputs = refs.outputs(self.pre, self.pre_dir, items, self.local, self.served.precision)
        return postprocess(self.post, outputs)

    def ask(self, conn: Client, protocol: Protocol, items: list[Sample]) -> Answer:
        from deploy.serving.service_client import ask

        return ask(conn, protocol, self.name, input_name(self.pre), [s.data for s in items])


def check(
    conns: dict[Protocol, Client],
    name: str,
    found: dict[str, Model],
    refs: References,
    gate: Gate,
    source: Path | None,
) -> tuple[ServiceCheck, list[str]]:
    """Sends the samples to ensemble `name` over each protocol; (what came back, problems)."""
    service = Service.of(name, found)
    items = samples(service.pre.kind, source)
    ref = service.expected(refs, items)
    result = ServiceCheck(service.post.kind if service.post else "tensors", [s.name for s in items])
    result.reference = [_line(s.name, ref, service.labels, i) for i, s in enumerate(items)]
    problems = []
    for protocol, conn in conns.items():
        answer = service.ask(conn, protocol, items)
        result.latency_ms[protocol] = answer.latency_ms
        result.answers[protocol] = [
            _line(s.name, answer.outputs, service.labels, i) for i, s in enumerate(items)
        ]
        problems += [f"{protocol}: {p}" for p in _compare(result, answer.outputs, ref, service.labels, gate)]
    return result, problems


def concurrent(
    refs: References, service: Service, gate: Gate, params: SmokeParams, reach: TrafficServer
) -> Traffic:
    """Clients at once, each sending its own images / sentences (`reach`: traffic.TrafficServer)."""
    from deploy.stages.smoke import traffic

    requests = concurrent_requests(service.pre.kind, params.service.samples)
    expected = [service.expected(refs, items) for items in requests]

    def ask(conn: Client, protocol: str, request: int) -> Arrays:
        return service.ask(conn, Protocol(protocol), requests[request]).outputs

    def judge(request: int, got: Arrays) -> list[str]:
        scratch = ServiceCheck("", [])
        return _compare(scratch, got, expected[request], service.labels, gate)

    load = traffic.plan(
        [len(r) for r in requests], params.clients, params.batching_requests, params.protocols
    )
    merging = "dynamic_batching" in (service.served.directory / "config.pbtxt").read_text()
    return traffic.run(reach, ask, judge, load, merging)


def _version_dir(model: Model) -> Path:
    return sorted(p for p in model.directory.iterdir() if p.is_dir() and p.name.isdigit())[-1]


def _labels(post: PostRecord | None, model: Model | None) -> list[str] | None:
    if not isinstance(post, ClassifyRecord) or model is None or post.labels is None:
        return None
    return (_version_dir(model) / post.labels).read_text(encoding="utf-8").splitlines()


def _line(name: str, outputs: dict[str, np.ndarray], labels: list[str] | None, row: int) -> str:
    if "classes" in outputs:
        picks = [
            f"{labels[c] if labels else c} {s:.3f}"
            for c, s in zip(outputs["classes"][row], outputs["scores"][row])
        ]
        return f"{name}: {', '.join(picks)}"
    first = next(iter(outputs.values()))[row].reshape(-1)[:4]
    return f"{name}: [{', '.join(f'{v:.4f}' for v in first)}, ...]"


def _compare(
    result: ServiceCheck,
    served: Arrays,
    ref: dict[str, np.ndarray],
    labels: list[str] | None,
    gate: Gate,
) -> list[str]:
    missing = [n for n in ref if n != "probabilities" and n not in served]
    if missing:
        return [f"the ensemble answered {sorted(served)}, not {missing}"]
    if "classes" in ref:
        return _compare_classes(result, served, ref, labels, gate)
    pairs = [shared_infinities_zeroed(ref[n][i], served[n][i]) for n in ref for i in range(len(ref[n]))]
    worst = float(np.min([cosine(s, r) for r, s in pairs]))  # the same infinity at one place agrees
    result.min_cosine = worst if result.min_cosine is None else float(np.min([result.min_cosine, worst]))
    return [] if worst >= gate.min_cosine else [f"cosine {worst:.6f} < {gate.min_cosine}"]


def _compare_classes(
    result: ServiceCheck,
    served: Arrays,
    ref: dict[str, np.ndarray],
    labels: list[str] | None,
    gate: Gate,
) -> list[str]:
    classes = served["classes"].astype(np.int64)
    agreement = float(np.mean(classes[:, 0] == ref["classes"][:, 0]))
    at_served = np.take_along_axis(ref["probabilities"], classes, axis=1)
    worst = float(np.min([cosine(s, r) for s, r in zip(served["scores"], at_served)]))
    result.top1_agreement = (
        agreement if result.top1_agreement is None else min(result.top1_agreement, agreement)
    )
    result.min_cosine = worst if result.min_cosine is None else float(np.min([result.min_cosine, worst]))
    problems = []
    if agreement < gate.min_top1_agreement:
        problems.append(f"top-1 agreement {agreement:.2f} < {gate.min_top1_agreement}")
    if not worst >= gate.min_cosine:  # NaN fails
        problems.append(f"top-k scores cosine {worst:.6f} < {gate.min_cosine}")
    want = [[labels[c] if labels else str(c) for c in row] for row in classes]
    got = [[_text(v) for v in row] for row in served["labels"]]
    if got != want:
        problems.append(f"labels {got[:1]} do not name classes {want[:1]}")
    return problems


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- the smoke stage's view: one ModelResult per ensemble and per pre / post model -------------
def parts(served: Served, results: dict[str, ModelResult]) -> dict[str, ModelResult]:
    """Pre / post models answer for themselves only through their ensembles."""
    parts = {}
    for name in (
        n for n in served.states if served.found[n].role in (Role.PRE, Role.POST) and n not in results
    ):
        model = served.found[name]
        users = [e for e, r in results.items() if name in served.found[e].steps]
        passed = [e for e in users if results[e].status is ModelStatus.PASSED]
        status = ModelStatus.PASSED if passed else ModelStatus.FAILED
        note = f"checked through {', '.join(users)}" if users else "in no ensemble that loaded"
        parts[name] = ModelResult.of(model, status, reference=note)
        if status is ModelStatus.FAILED:
            parts[name].problems.append(note)
    return parts


# -- concurrent clients, each with its own image or sentence -----------------------------------
REQUEST_SIZES = (1, 2)  # samples per request, in turn
DISTINCT = 8  # distinct samples the clients share out


def concurrent_requests(kind: str, source: Path | None) -> list[list[Sample]]:
    """Distinct requests of one or two samples each: the samples, and for images variants
    of them (a crop, mirrored), so that no two clients send the same bytes."""
    from deploy.serving.service_client import variants

    items = variants(kind, samples(kind, source), DISTINCT)
    found, start = [], 0
    for size in REQUEST_SIZES * len(items):
        if start + size > len(items):
            break
        found.append(items[start : start + size])
        start += size
    return found


def check_ensemble(served: Served, name: str, refs: References, params: SmokeParams) -> ModelResult:
    """`params`: the smoke stage's (protocols, request timeout, service gates and samples);
    `refs`: the run's references (one for every ensemble: service_reference.py)."""
    from deploy.stages.smoke import checks, traffic

    model = served.found[name]
    wiring = record(model)
    assert isinstance(wiring, EnsembleRecord)
    precision = served.found[wiring.model].precision
    conns = {p: checks.client(served.server, p, params.request_timeout_s) for p in params.protocols}
    found, problems = check(conns, name, served.found, refs, _gate(params), params.service.samples)
    load = None
    if not problems and params.batching_requests:
        service = Service.of(name, served.found)
        with traffic.reach(served.server, service.served.directory.name, params.request_timeout_s) as clients:
            load = concurrent(refs, service, _gate(params), params, clients)
        problems += load.problems()
    runs = reference_name(served.found[wiring.model])
    reference = f"{runs} inside Python pre/post-processing (torchvision transforms / tokenizers, torch)"
    status = ModelStatus.FAILED if problems else ModelStatus.PASSED
    return ModelResult(
        status,
        "ensemble",
        precision,
        "ensemble",
        reference=reference,
        problems=problems,
        service=found,
        traffic=load,
        role=Role.ENSEMBLE.value,
    )


def _gate(params: SmokeParams) -> Gate:
    gate = params.service.gate
    return Gate(gate.min_top1_agreement, gate.min_cosine)


def numbers(check: ServiceCheck) -> str:
    numbers = [
        f"{len(check.samples)} {'sentences' if check.kind == AnswerKind.EMBEDDING else 'inputs'} end to end"
    ]
    if check.top1_agreement is not None:
        numbers.append(f"top-1 agreement {check.top1_agreement:.2f}")
    if check.min_cosine is not None:
        numbers.append(f"min cos {check.min_cosine:.6f}")
    numbers += [f"{p} {ms:.0f} ms" for p, ms in check.latency_ms.items()]
    return ", ".join(numbers)


def answers_table(ctx: StageContext, models: dict[str, ModelResult]) -> None:
    """Each sample with the served answer (first protocol) and the reference's."""
    rows = []
    for name, r in models.items():
        if r.service is None or not r.service.answers:
            continue
        served = next(iter(r.service.answers.values()))
        rows += [
            [name, s, a.split(": ", 1)[-1], ref.split(": ", 1)[-1]]
            for s, a, ref in zip(r.service.samples, served, r.service.reference)
        ]
    if rows:
        ctx.report_table(
            "Published services: real inputs end to end", ["ensemble", "input", "served", "reference"], rows
        )
