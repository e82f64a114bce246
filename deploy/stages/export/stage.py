"""export: ONNX with dynamic axes from the shape spec, checked in ONNX Runtime.

`exporter: auto` (the default) tries torch.export first and, where it fails (the export
itself, or ONNX Runtime on its graph at the min / opt / max shapes), the legacy
TorchScript-based exporter, which upstream deprecates; the path taken and why go into
the summary and the run report. A config can pin either one.
"""

from __future__ import annotations

import contextlib
import shutil
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from deploy.domain.artifacts import EAGER, GOLDEN, ONNX
from deploy.modelio.onnx_files import MODEL_FILE
from deploy.pipeline.errors import StageFailed, clip
from deploy.pipeline.graph.contract import (
    SOURCE_ARTIFACT,
    Artifact,
    ArtifactKind,
    Section,
    StageContext,
    StageSpec,
)
from deploy.stages.export import exporters, failures
from deploy.stages.export.failures import Attempt
from deploy.stages.export.params import Exporter, ExportParams

if TYPE_CHECKING:
    import onnx
    from torch.nn import Module

    from deploy.gates.parity import Table
    from deploy.gates.references import Golden
    from deploy.modelio.frozen import FrozenValue


def run(ctx: StageContext, params: ExportParams) -> None:
    from deploy.gates import references
    from deploy.modelio.loading import load_adapted

    golden = references.load(ctx.input(GOLDEN))
    model = load_adapted(ctx.config, golden["opt"].inputs).exportable()
    failures.refuse_wrapped_script(model)
    attempts: list[Attempt] = []
    last: Exception | None = None
    for exporter in params.exporter.attempts:
        try:
            table = _attempt(exporter, model, ctx, params, golden)
        except Exception as exc:
            ctx.log.error("%s failed", exporter.value, exc_info=exc)
            attempts.append(failures.attempt_failed(exporter, exc))
            shutil.rmtree(ctx.output(ONNX).parent)
            last = exc
            continue
        attempts.append(Attempt(exporter))
        _say(ctx, params, attempts, table)
        return
    _say(ctx, params, attempts, None)
    raise StageFailed(failures.message(params.exporter, attempts) + _draws(model, golden)) from last


def _draws(model: Module, golden: Golden) -> str:
    """A forward drawing random numbers with its own seeded generator answers the same
    every call (so golden took it), and both exporters failed in their internals' words
    ("SymIntArrayRef expected to contain only concrete integers"): said in the model's."""
    import torch

    from deploy.modelio.randomness import random_ops

    feeds = [torch.from_numpy(a) for a in golden["opt"].inputs.values()]
    ops = random_ops(lambda: model(*feeds))
    if not ops:
        return ""
    return (
        f". The forward draws random numbers ({'; '.join(ops[:3])}): an exporter cannot capture a "
        "generator; make the noise an input, or leave it out at inference"
    )


def _attempt(
    exporter: Exporter, model: Module, ctx: StageContext, params: ExportParams, golden: Golden
) -> Table:
    """One exporter's ONNX, checked by onnx.checker and by ONNX Runtime against eager at
    every golden shape: the parity table."""
    import onnx

    from deploy.gates import diagnosis, parity, references
    from deploy.gates.detection_parity import layout_of
    from deploy.modelio import onnx_files
    from deploy.runtimes.onnxrt import OnnxRuntime

    with _shown() as said:
        found = exporters.export(exporter, model, ctx.config, ctx.output(ONNX), golden, params)
    _frozen(ctx, found, params)
    onnx_files.check(ctx.output(ONNX))
    header = onnx.load(str(ctx.output(ONNX)), load_external_data=False)
    _record_opset(ctx, header, params.opset_for(exporter))
    fixed = onnx_files.fixed_dims(header, ctx.config.inputs)
    if fixed:
        refused = exporters.refused_dims(model, ctx.config, golden) if exporter is Exporter.DYNAMO else ""
        ctx.log.info("torch.export on its own: %s", refused or "keeps the dims")
        raise StageFailed(
            f"the {exporter.value} export fixed dims the shape spec declares dynamic ({'; '.join(fixed)}): the model "
            "computes something that holds only at that size (torch.export's guard, a loop unrolled to the example's "
            f"length){_assigned(said)}{_violated(refused)}; make the dim static in the shape spec if it is, else change "
            "the model"
        )
    runtime = OnnxRuntime(ctx.output(ONNX), outputs=ctx.config.output_names())
    table = parity.compare(references.run(runtime, golden), golden, params.tolerance, layout_of(ctx.config))
    what = f"ONNX Runtime ({exporter.value} export) vs eager"
    try:
        diagnosis.judge(
            what, table, params.tolerance, golden, ctx.input(EAGER), runtime.infer, "stages.export.tolerance"
        )
    except StageFailed as exc:  # a guard torch.onnx let pass: one branch of a size test, kept dynamic
        other = exporter is Exporter.DYNAMO and "not float rounding" in str(exc)  # not for a tolerance
        refused = exporters.refused_dims(model, ctx.config, golden) if other else ""
        if _violated(refused):
            ctx.log.info("torch.export on its own: %s", refused)
            raise StageFailed(f"{exc}{_violated(refused)}") from exc
        raise
    return table


@contextlib.contextmanager
def _shown() -> Iterator[list[warnings.WarningMessage]]:
    """The export's warnings, kept for the stage's messages and shown in its log as before,
    whether the export returns or raises (under the process's own warning filters)."""
    said: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            said = caught
            yield said
    finally:  # outside the recording: shown in the log, not recorded again
        for w in said:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _assigned(said: list[warnings.WarningMessage]) -> str:
    """torch.export's word on tensors the forward stores on the module (raft_small's
    correlation pyramid): traced as constants of the example's size, they fix its dims."""
    stored = next((str(w.message) for w in said if "were assigned during export" in str(w.message)), None)
    if stored is None:
        return ""
    return f"; torch.export: {stored.split('. Such')[0]} (the forward stores tensors on the module)"


def _violated(refused: str) -> str:
    """torch.export's first line, where it names the dims it cannot keep (its guards, in the log)."""
    first = refused.splitlines()[0] if refused else ""
    if not first.startswith("Constraints violated"):
        return ""
    return f"; torch.export alone: {first.split('!')[0]} (the model tests those sizes: its guards in the stage log)"


def _frozen(ctx: StageContext, found: list[FrozenValue], params: ExportParams) -> None:
    """The user's own frozen lines fail this export; a library's are recorded and logged."""
    from deploy.modelio import frozen

    libraries = [f.text() for f in found if f.in_library]
    for line in libraries:
        ctx.log.warning("the trace froze a value in library code: %s", line)
    if libraries:
        ctx.record("frozen_in_libraries", libraries[:20])
    frozen.refuse(found, params.accept_frozen, "the legacy exporter", "stages.export.accept_frozen")


def _say(ctx: StageContext, params: ExportParams, attempts: list[Attempt], table: Table | None) -> None:
    """The path taken (and why) in the summary, the report and the headline."""
    from deploy.gates import parity

    used = next((a.exporter for a in attempts if a.ok), None)
    ctx.record(
        "exporter",
        {
            "asked": params.exporter.value,
            "used": used.value if used else None,
            "attempts": [
                {"exporter": a.exporter.value, "error": a.error, "cause": a.cause} for a in attempts
            ],
        },
    )
    if params.exporter is Exporter.AUTO or len(attempts) > 1:
        rows = [[a.exporter.value, "used" if a.ok else "failed", a.cause or a.error] for a in attempts]
        ctx.report_table("Export: the path taken", ["exporter", "result", "why"], rows)
    if table is None or used is None:
        return
    ctx.record("parity", parity.to_json(table))
    ctx.headline(
        f"{_path(params.exporter, attempts)}, opset {ctx.metrics['opset_written']}, {ctx.metrics['nodes']} nodes, "
        f"ORT vs eager: {parity.headline(table, params.tolerance)}"
    )


def _path(asked: Exporter, attempts: list[Attempt]) -> str:
    used = next(a for a in attempts if a.ok).exporter.value
    failed = [a for a in attempts if not a.ok]
    if asked is not Exporter.AUTO:
        return used
    if not failed:
        return f"auto: {used}"
    return f"auto: {used} (torch.export failed: {clip(failed[0].cause or failed[0].error, 120)})"


def _record_opset(ctx: StageContext, proto: onnx.ModelProto, requested: int) -> None:
    written = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    ctx.record("opset_requested", requested)
    ctx.record("opset_written", written)
    ctx.record("nodes", len(proto.graph.node))
    if written != requested:
        ctx.log.warning("asked for opset %s, the exporter wrote opset %s", requested, written)


SPEC = StageSpec(
    name="export",
    version=5,  # 5: parity at sampled shapes and value edges, frozen values refused, causes diagnosed; 4: exporter auto (torch.export, then the legacy exporter), forward's other arguments bound
    params=ExportParams,
    inputs=(SOURCE_ARTIFACT, "golden", "eager"),
    outputs=(Artifact("onnx", ArtifactKind.TREE, entry=MODEL_FILE),),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "onnx", "onnxruntime", "onnxscript", "onnx-ir", "numpy"),
    description="ONNX export with dynamic axes (auto: torch.export, else the legacy exporter); ONNX Runtime parity vs eager",
)
