"""validate: the parity gate. Runs the final ONNX (ONNX Runtime) and the TorchScript
module on the golden inputs at every recorded shape and compares each output with
the eager reference; any threshold exceeded fails the run."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from deploy.domain.artifacts import EAGER, GOLDEN, REPORT
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.graph.contract import Artifact, Phase, Section, StageContext, StageSpec
from deploy.runtimes.base import Device
from deploy.runtimes.catalog import CATALOG, PARITY, get, names, registered

if TYPE_CHECKING:
    from deploy.gates.parity import ParityReport, Table
    from deploy.runtimes.base import Session


class ValidateParams(Tolerance):
    runtimes: tuple[str, ...] = Field(
        ("onnxruntime", "torchscript"),
        min_length=1,
        description=f"Runtimes compared with the eager reference on the golden inputs, of: {names(PARITY)} "
        "(openvino: the openvino stage's FP32 IR, computed in f32; tensorrt: the built engine; a CUDA one "
        "where this machine has a GPU, else skipped with the reason).",
    )

    @field_validator("runtimes")
    @classmethod
    def _checkable(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return registered(value, PARITY, "cannot be checked for parity")


def run(ctx: StageContext, params: ValidateParams) -> None:
    from deploy.gates import diagnosis, parity, references
    from deploy.gates.detection_parity import layout_of

    golden = references.load(ctx.input(GOLDEN))
    tables: dict[str, parity.Table] = {}
    sessions: dict[str, Session] = {}
    skipped: dict[str, str] = {}
    for runtime in params.runtimes:
        if why := _cannot(runtime, ctx):
            skipped[runtime] = why
        else:
            sessions[runtime] = _session(runtime, ctx)
            answers = references.run(sessions[runtime], golden)
            tables[runtime] = parity.compare(answers, golden, params, layout_of(ctx.config))
    report = _report(tables, skipped, params).to_json()
    ctx.record("parity", report)
    ctx.headline(
        "; ".join(
            [f"{r}: {parity.headline(t, params)}" for r, t in tables.items()]
            + [f"{r}: skipped" for r in skipped]
        )
    )
    rows = [row for r, t in tables.items() for row in parity.report_rows(r, t)]
    note = "; ".join(f"{r}: {why}" for r, why in skipped.items())
    ctx.report_table("Parity vs the eager reference", parity.REPORT_COLUMNS, rows, note=note)
    ctx.output(REPORT).write_text(json.dumps(report, indent=1))
    for name, table in tables.items():
        diagnosis.judge(f"{name} vs eager", table, params, golden, ctx.input(EAGER), sessions[name].infer)


def _report(tables: dict[str, Table], skipped: dict[str, str], params: ValidateParams) -> ParityReport:
    from deploy.gates import parity

    thresholds = Tolerance(**params.model_dump(exclude={"runtimes"})).model_dump(mode="json")
    lines = {r: parity.RuntimeParity(t, not parity.failures(t, params)) for r, t in tables.items()}
    return parity.ParityReport(
        thresholds, lines | {r: parity.RuntimeParity(skipped=why) for r, why in skipped.items()}
    )


def _cannot(runtime: str, ctx: StageContext) -> str | None:
    """Why the runtime is not checked here: its artifact was not made, or this machine
    cannot run it (a CUDA one without a GPU)."""
    plugin = get(runtime)
    if plugin.artifact not in ctx.inputs:
        return plugin.absent or f"no {plugin.artifact}: its stage was skipped or is not configured"
    return plugin.unavailable(plugin.on(Device.CPU))


def _session(runtime: str, ctx: StageContext) -> Session:
    hook = get(runtime).parity
    assert hook is not None, f"{runtime} has no parity hook"
    return hook(ctx)


def inputs_for(params: ValidateParams) -> tuple[str, ...]:
    wanted = {get(r).artifact for r in params.runtimes} - set(ALWAYS)
    return (*ALWAYS, *(a for a in ARTIFACTS if a in wanted))


# What the checked runtimes load; the reference and the ONNX file (simplify's) always.
ARTIFACTS = tuple(dict.fromkeys(CATALOG[r].artifact for r in PARITY))
ALWAYS = ("onnx", "golden", "eager")

SPEC = StageSpec(
    phase=Phase.VERIFY,
    name="validate",
    version=5,  # 5: every golden case, failures diagnosed (eager.json); 4: openvino among the runtimes; 3: parity.json a versioned record (gates/parity.py ParityReport)
    params=ValidateParams,
    inputs=(*ARTIFACTS, "golden", "eager"),
    outputs=(Artifact("report", filename="parity.json"),),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnxruntime", "openvino", "torch", "numpy"),
    select_inputs=inputs_for,
    optional_inputs=frozenset({"engine"}),
    # the torch.export path has no trace stage; a config may have no openvino stage
    if_configured=frozenset({"torchscript", "openvino"}),
    description="parity gate: ONNX Runtime, TorchScript and OpenVINO vs the eager reference",
    timeout_s=1800,
)
