"""Automatic fallback for reduced precision (INT8, FP16): when the accuracy gate fails,
keep the nodes that hurt accuracy most in FP32 until it passes.

Sensitivity is measured once, on the calibration inputs (never the held-out ones the
gate judges): the FP32 model and the fully converted one both expose every eligible
node's input and output tensors, and a node's *added error* is the error (1 - cosine
against FP32) at its outputs less the worst error already present at its inputs, so
the error a node inherits from upstream is not charged to it. The ranked nodes are then
kept in FP32 in growing prefixes (1, 2, 4, ... up to the limit), and once a prefix
passes, the smallest passing prefix is found by bisection: each try is a real
conversion judged by the real gate. Imports onnx and numpy (via the runtime) when run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import JsonValue

from deploy.domain.artifacts import ONNX
from deploy.gates.accuracy_report import Accuracy, Evidence
from deploy.gates.metrics import cosine, shared_infinities_zeroed
from deploy.gates.tolerance import AccuracyGate, AutoFallback
from deploy.modelio import onnx_files
from deploy.modelio.onnx_files import MODEL_FILE
from deploy.runtimes.base import Device, Feeds

if TYPE_CHECKING:
    import onnx

    from deploy.pipeline.graph.contract import StageContext

# kept_float node names -> where to write the converted model
Build = Callable[[tuple[str, ...], Path], None]
# converted model -> (metrics, gate failures)
Judge = Callable[[Path], tuple[Accuracy, list[str]]]


@dataclass(frozen=True)
class Sensitivity:
    node: str
    op_type: str
    added_error: float  # 1 - cosine at its outputs, less the worst at its inputs
    # Static Q/DQ: a tensor keeps its Q/DQ pair while its producer is quantized, so keeping
    # this node's inputs in float means keeping their (eligible) producers in FP32 too.
    partners: tuple[str, ...] = ()

    def nodes(self) -> tuple[str, ...]:
        return (self.node, *self.partners)


@dataclass(frozen=True)
class FallbackAttempt:
    kept_float: tuple[str, ...]
    failures: tuple[str, ...]
    worst_cosine: float | None

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class FallbackResult:
    chosen: Path
    kept_float: tuple[str, ...] = ()
    ranking: list[Sensitivity] = field(default_factory=list)
    attempts: list[FallbackAttempt] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return any(a.passed and a.kept_float == self.kept_float for a in self.attempts)


class _Search:
    """The tries of one fallback search, each written to its own file."""

    def __init__(self, build: Build, judge: Judge, work: Path) -> None:
        self.build, self.judge, self.work = build, judge, work
        self.attempts: list[FallbackAttempt] = []
        self.paths: dict[tuple[str, ...], Path] = {}

    def passes(self, kept: tuple[str, ...]) -> bool:
        path = self.work / f"fallback-{len(self.attempts)}" / MODEL_FILE  # its weights may lie beside it
        path.parent.mkdir(parents=True, exist_ok=True)
        self.build(kept, path)
        metrics, bad = self.judge(path)
        cosines = [m.cosine for m in metrics.values() if m.cosine is not None]
        self.attempts.append(FallbackAttempt(kept, tuple(bad), min(cosines) if cosines else None))
        self.paths[kept] = path
        return not bad


def search(
    build: Build, judge: Judge, rank: Callable[[Path], list[Sensitivity]], limit: int, work: Path
) -> FallbackResult:
    """The fewest most-sensitive nodes kept in FP32 that pass the gate; when even `limit`
    nodes do not, the outcome holds the last try (and `passed` is False)."""
    tries = _Search(build, judge, work)
    if tries.passes(()):
        return FallbackResult(tries.paths[()], attempts=tries.attempts)
    ranking = rank(tries.paths[()])
    prefixes = _prefixes(ranking, limit)
    low, high = _first_passing_prefix(tries, prefixes)
    if high is None:
        return FallbackResult(tries.paths[prefixes[low]], prefixes[low], ranking, tries.attempts)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if tries.passes(prefixes[mid]) else (mid, high)
    return FallbackResult(tries.paths[prefixes[high]], prefixes[high], ranking, tries.attempts)


def _prefixes(ranking: list[Sensitivity], limit: int) -> list[tuple[str, ...]]:
    """prefixes[k]: the nodes kept in FP32 for the k most sensitive entries, while they
    stay within `limit` nodes."""
    found: list[tuple[str, ...]] = [()]
    for entry in ranking:
        kept = tuple(dict.fromkeys([*found[-1], *entry.nodes()]))
        if len(kept) > limit:
            break
        found.append(kept)
    return found


def _first_passing_prefix(tries: _Search, prefixes: list[tuple[str, ...]]) -> tuple[int, int | None]:
    """(largest failing, smallest passing) prefix index met while doubling; (last, None)
    when no prefix passes."""
    cap, low, size = len(prefixes) - 1, 0, 1
    while 0 < size <= cap:
        if tries.passes(prefixes[size]):
            return low, size
        low, size = size, (min(2 * size, cap) if size < cap else 0)
    return low, None


# -- sensitivity ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvertedGraph:
    """The converted graph, to tell which reference nodes the conversion changed."""

    names: frozenset[str]
    dequantized: dict[str, str]  # DequantizeLinear output -> the float tensor it stands for
    inputs: dict[str, tuple[str, ...]]

    @classmethod
    def load(cls, path: Path) -> ConvertedGraph:
        import onnx

        nodes = onnx.load(str(path), load_external_data=False).graph.node
        quantized = {n.output[0]: n.input[0] for n in nodes if n.op_type == "QuantizeLinear"}
        dq = {
            n.output[0]: quantized.get(n.input[0], n.input[0])
            for n in nodes
            if n.op_type == "DequantizeLinear"
        }
        return cls(frozenset(n.name for n in nodes), dq, {n.name: tuple(n.input) for n in nodes})

    def quantized_inputs(self, node: onnx.NodeProto) -> list[str]:
        """The float tensors reaching `node` through a Q/DQ pair (static recipe)."""
        return [self.dequantized[i] for i in self.inputs.get(node.name, ()) if i in self.dequantized]

    def quantized(self, node: onnx.NodeProto) -> bool:
        """Replaced (dynamic: MatMulInteger under a new name) or fed by DequantizeLinear
        (static Q/DQ); a node the quantizer left alone (an activation-by-activation MatMul
        in the dynamic recipe) is neither, and keeping it in FP32 would change nothing."""
        if node.name not in self.names:
            return True
        return bool(self.quantized_inputs(node))


# May this reference node be kept in float? (reference node, converted graph)
Eligible = Callable[["onnx.NodeProto", ConvertedGraph], bool]


def rank(
    reference: Path,
    candidate: Path,
    feeds: Sequence[Feeds],
    eligible: Eligible,
    work: Path,
) -> list[Sensitivity]:
    """Eligible nodes of `reference` by the error each adds in `candidate`, worst first."""
    import onnx

    converted = ConvertedGraph.load(candidate)
    graph = onnx.load(str(reference), load_external_data=False).graph
    nodes = [n for n in graph.node if eligible(n, converted)]
    tensors = sorted({t for n in nodes for t in [*n.input, *n.output] if t})
    ref = _observe(reference, tensors, feeds, work / "observe-fp32.onnx")
    got = _observe(candidate, tensors, feeds, work / "observe-candidate.onnx")
    error = {t: _error(ref[t], got[t]) for t in ref.keys() & got.keys() if ref[t].shape == got[t].shape}
    links = _Links(nodes, converted, {t for t, a in got.items() if not np.all(np.isfinite(a))})
    found = [
        Sensitivity(n.name, n.op_type, _added(n, error), links.partners(n))
        for n in nodes
        if any(o in error for o in n.output)
    ]
    return sorted(found, key=lambda s: -s.added_error)


class _Links:
    """Which other nodes must stay in FP32 with a node for that to help: the producers of
    its Q/DQ'd inputs (static INT8: a tensor keeps its Q/DQ pair while its producer is
    quantized), and the readers of an output it overflows (FP16: a result that does not
    fit FP16 overflows again in a reader that converts it back to FP16)."""

    def __init__(
        self, nodes: Sequence[onnx.NodeProto], converted: ConvertedGraph, overflowed: set[str]
    ) -> None:
        self.converted, self.overflowed = converted, overflowed
        self.producers = {o: n.name for n in nodes for o in n.output}
        self.readers: dict[str, list[str]] = {}
        for n in nodes:
            for i in n.input:
                self.readers.setdefault(i, []).append(n.name)

    def partners(self, node: onnx.NodeProto) -> tuple[str, ...]:
        found = [self.producers[t] for t in self.converted.quantized_inputs(node) if t in self.producers]
        if not any(i in self.overflowed for i in node.input):  # the overflow starts here
            found += [r for o in node.output if o in self.overflowed for r in self.readers.get(o, [])]
        return tuple(dict.fromkeys(p for p in found if p != node.name))


def _added(node: onnx.NodeProto, error: Mapping[str, float]) -> float:
    inherited = max((error[i] for i in node.input if i in error), default=0.0)
    return max(error[o] for o in node.output if o in error) - inherited


def _error(ref: np.ndarray, got: np.ndarray) -> float:
    """1 - cosine; a NaN / inf output is the worst error there is (2, anti-parallel)."""
    found = cosine(*shared_infinities_zeroed(ref, got))  # -inf in both (a mask) is no error
    return 2.0 if np.isnan(found) else 1.0 - found


def _observe(model: Path, tensors: list[str], feeds: Sequence[Feeds], dest: Path) -> dict[str, np.ndarray]:
    """The float tensors among `tensors` that `model` computes, over all feeds (each
    flattened, samples side by side)."""
    from deploy.runtimes.onnxrt import OnnxRuntime

    runtime = OnnxRuntime(_expose(model, tensors, dest))
    runs = [runtime.infer(feed) for feed in feeds]
    floats = [name for name, array in runs[0].items() if array.dtype.kind == "f"]
    return {name: np.concatenate([r[name].reshape(1, -1) for r in runs], axis=1) for name in floats}


def _expose(model: Path, tensors: list[str], dest: Path) -> Path:
    """`model` with `tensors` as graph outputs, untyped: ONNX Runtime infers their types,
    also past the contrib ops a quantizer writes, where ONNX's shape inference stops.
    Graph inputs and weights are left out: they carry no conversion error."""
    import onnx

    proto = onnx.load(str(model))
    graph = proto.graph
    constant = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    present = {o.name for o in graph.output}
    produced = {o for n in graph.node for o in n.output}
    wanted = [t for t in tensors if t in produced and t not in constant | present]
    graph.output.extend(onnx.ValueInfoProto(name=t) for t in wanted)
    onnx_files.save(proto, dest, onnx_files.uses_external_data(model))
    return dest


# -- the stages' ending ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Conversion:
    """What a reduced-precision stage hands over: how to convert (keeping given nodes in
    FP32), the model whose node names those are, and which of its nodes may be kept."""

    label: str  # "INT8", "FP16"
    output: str  # the stage's artifact name for the converted model
    report: str  # and for its accuracy report
    build: Build
    reference: Path
    eligible: Eligible
    target: Device = Device.CPU  # where the precision is meant to run (FP16: a GPU)


def conclude(
    ctx: StageContext,
    conversion: Conversion,
    calibration: Sequence[Feeds],
    holdout: list[dict[str, np.ndarray]],
    gate: AccuracyGate,
    auto: AutoFallback,
    details: Mapping[str, object],
    evidence: Evidence,
) -> None:
    """Converts, with the automatic fallback when asked, then gates (gates/accuracy.py)
    on `holdout` (`evidence` says what those inputs are)."""
    from deploy.gates import accuracy

    dest = ctx.output(conversion.output)
    label = conversion.label
    if ctx.config.model.decoder is not None:  # judged by what it generates; no node search
        from deploy.gates import decoder_gate

        conversion.build((), dest)
        decoder_gate.conclude(
            ctx, label, dest, gate.decoder, details, conversion.report, target=conversion.target
        )
        return
    if auto.auto:
        outcome = _searched(ctx, conversion, calibration, holdout, gate, auto)
        onnx_files.copy(outcome.chosen, dest)
        _report(ctx, conversion.label, outcome)
        if outcome.kept_float:
            label = f"{conversion.label} ({len(outcome.kept_float)} nodes kept FP32)"
        details = {**details, "fallback": to_json(outcome, auto)}
    else:
        conversion.build((), dest)
    accuracy.conclude(
        ctx, label, dest, holdout, gate, details, conversion.report, evidence, target=conversion.target
    )


def _searched(
    ctx: StageContext,
    conversion: Conversion,
    calibration: Sequence[Feeds],
    holdout: list[dict[str, np.ndarray]],
    gate: AccuracyGate,
    auto: AutoFallback,
) -> FallbackResult:
    """The automatic fallback's search: nodes kept in FP32, most sensitive first, until the
    gate against the FP32 model passes."""
    from deploy.gates import accuracy

    return search(
        conversion.build,
        lambda path: accuracy.gate_against_fp32(ctx.input(ONNX), path, holdout, ctx.config.outputs, gate),
        lambda first: rank(conversion.reference, first, calibration, conversion.eligible, ctx.workdir),
        auto.max_float_nodes,
        ctx.workdir,
    )


def to_json(outcome: FallbackResult, auto: AutoFallback) -> dict[str, JsonValue]:
    return {
        "kept_float": list(outcome.kept_float),
        "max_float_nodes": auto.max_float_nodes,
        "attempts": [asdict(a) | {"passed": a.passed} for a in outcome.attempts],
        "ranking": [asdict(s) for s in outcome.ranking[:RANKING_SHOWN]],
    }


RANKING_SHOWN = 20


def _report(ctx: StageContext, label: str, outcome: FallbackResult) -> None:
    kept = set(outcome.kept_float)
    rows = [
        [s.node, s.op_type, f"{s.added_error:.3g}", "FP32" if s.node in kept else label]
        for s in outcome.ranking[:RANKING_SHOWN]
    ]
    note = "; ".join(
        f"{len(a.kept_float)} kept: {'pass' if a.passed else 'fail'} (worst cosine {_maybe(a.worst_cosine)})"
        for a in outcome.attempts
    )
    ctx.report_table(
        f"{label} automatic fallback: the most sensitive nodes (added error on the calibration inputs)",
        ["node", "op", "added error (1 - cosine)", "runs in"],
        rows,
        note="tries: " + note,
    )
    ctx.log.info("fallback tries: %s", note)


def _maybe(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.5f}"
