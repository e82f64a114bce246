"""trace: TorchScript via torch.jit.trace of the model behind its I/O adapter.

The saved TorchScript file, loaded back, is checked against eager PyTorch at every golden
case (min / opt / max, sampled shapes, value edges), which catches shape specialisation and
data-dependent control flow that tracing silently bakes in, and what saving loses; a
TracerWarning in the user's own code is an error naming the line (modelio/frozen.py). Its
answers are kept for validate (gates/kept_answers.py), which judges the same file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from deploy.domain.artifacts import EAGER, GOLDEN, TORCHSCRIPT, TORCHSCRIPT_ANSWERS
from deploy.domain.issues import Issue
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.graph.contract import SOURCE_ARTIFACT, Artifact, Section, StageContext, StageSpec
from deploy.spec.config import DeployConfig

if TYPE_CHECKING:
    import torch


class TraceParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    # TorchScript should reproduce eager almost bit for bit.
    tolerance: Tolerance = Field(
        Tolerance(atol=1e-5, rtol=1e-4, min_cosine=0.99999),
        description="TorchScript vs eager outputs on the golden inputs (tighter than elsewhere: tracing should be almost exact).",
    )
    accept_frozen: tuple[str, ...] = Field(
        (),
        description="Lines of your own code where the trace may freeze a value of the data (its TracerWarning), as "
        "`file.py:LINE` or `file.py`; anywhere else in your code that is an error naming the line.",
    )


def run(ctx: StageContext, params: TraceParams) -> None:
    import torch

    from deploy.gates import diagnosis, kept_answers, parity, references
    from deploy.gates.detection_parity import layout_of
    from deploy.modelio import frozen
    from deploy.modelio.loading import load_adapted
    from deploy.runtimes.torchrt import TorchModule

    config = ctx.config
    cases = references.load(ctx.input(GOLDEN))
    model = load_adapted(config, cases["opt"].inputs)
    eager = TorchModule(model, config.input_names(), config.output_names())
    with frozen.recording() as found:
        traced = _trace(model, eager.args(cases["opt"].inputs))
    libraries = [f.text() for f in frozen.unique(found) if f.in_library]
    if libraries:
        ctx.record("frozen_in_libraries", libraries[:20])
    frozen.refuse(found, params.accept_frozen, "torch.jit.trace", "stages.trace.accept_frozen")
    saved = ctx.output(TORCHSCRIPT)
    torch.jit.save(traced, str(saved))
    runtime = TorchModule.torchscript(saved, config.input_names(), config.output_names())
    answers = references.run(runtime, cases)
    table = parity.compare(answers, cases, params.tolerance, layout_of(config))
    ctx.record("parity", parity.to_json(table))
    ctx.headline("torchscript vs eager: " + parity.headline(table, params.tolerance))
    diagnosis.judge(
        "TorchScript vs eager",
        table,
        params.tolerance,
        cases,
        ctx.input(EAGER),
        runtime.infer,
        "stages.trace.tolerance",
    )
    kept_answers.keep(ctx.output(TORCHSCRIPT_ANSWERS), TORCHSCRIPT, saved, ctx.input(GOLDEN), answers)


def check(params: TraceParams, config: DeployConfig) -> list[Issue]:
    """A TorchScript source is called with one tensor per declared input, positionally:
    a forward that wants anything else fails here, before any stage runs."""
    from deploy.modelio.torchscript_signature import forward_args

    path = config.model.torchscript
    args = forward_args(path) if path is not None else None
    if args is None:
        return []
    where = "model.torchscript"
    issues = [
        Issue(
            where,
            f"forward argument '{name}' is {kind}, not a Tensor: the pipeline feeds only tensors "
            "(wrap the module so that forward takes tensors)",
        )
        for name, kind in args
        if kind != "Tensor"
    ]
    if len(args) != len(config.inputs):
        issues.append(
            Issue(
                where,
                f"forward takes {len(args)} argument(s) ({', '.join(n for n, _ in args)}), "
                f"the config declares {len(config.inputs)} input(s)",
            )
        )
    return issues


def _trace(model: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule:
    import torch

    # The adapter is traced even around a TorchScript source: the saved module then has
    # the pipeline's calling convention (tensors in, a tuple of the declared outputs out).
    with torch.no_grad():
        return torch.jit.trace(model, args, check_trace=False)


SPEC = StageSpec(
    name="trace",
    version=5,  # 5: the saved file checked (loaded back), its answers kept for validate; 4: frozen values refused, parity at every golden case, failures diagnosed
    params=TraceParams,
    inputs=(SOURCE_ARTIFACT, "golden", "eager"),
    outputs=(
        Artifact("torchscript", filename="model.pt"),
        Artifact("torchscript_answers", filename="torchscript_answers.npz"),
    ),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "numpy"),
    check=check,
    description="TorchScript trace, checked against the eager references at every recorded shape",
    timeout_s=1800,
)
