"""trace: TorchScript via torch.jit.trace, plus the golden inputs/outputs for parity.

The traced module is checked against eager PyTorch at every recorded shape (min /
opt / max), which catches shape specialisation and data-dependent control flow
that tracing silently bakes in.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipeline.config import LABELS, DeployConfig
from pipeline.errors import Issue
from pipeline.stage import SOURCE_ARTIFACT, Artifact, Section, StageContext, StageSpec
from stages._tolerance import Tolerance


class TraceParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    # TorchScript should reproduce eager almost bit for bit.
    tolerance: Tolerance = Field(
        Tolerance(atol=1e-5, rtol=1e-4, min_cosine=0.99999),
        description="TorchScript vs eager outputs on the golden inputs (tighter than elsewhere: tracing should be almost exact).",
    )


def run(ctx: StageContext, params: TraceParams) -> None:
    import numpy as np
    import torch

    from runtimes.torchrt import TorchModule
    from stages import _golden, _parity
    from stages._torch import load_model

    config = ctx.config
    model = load_model(config.model)
    rng = np.random.default_rng(config.model.seed)
    inputs = _golden.golden_inputs(config, rng)
    eager = TorchModule(model, config.input_names(), config.output_names())
    cases = {label: _golden.Case(inputs[label], eager.infer(inputs[label])) for label in LABELS}
    ctx.log.info("reference outputs: %s", _shapes(cases))
    _golden.refuse_constant(
        "reference output", {lb: case.outputs for lb, case in cases.items()}, _OUTPUT_HINT
    )
    traced = _trace(model, eager.args(inputs["opt"]))
    table = _parity.compare(
        _golden.run(TorchModule(traced, config.input_names(), config.output_names()), cases),
        cases,
        params.tolerance,
    )
    ctx.record("parity", _parity.to_json(table))
    ctx.headline("torchscript vs eager: " + _parity.headline(table, params.tolerance))
    _parity.gate("TorchScript vs eager", table, params.tolerance)
    torch.jit.save(traced, str(ctx.output("torchscript")))
    _golden.save(ctx.output("golden"), cases)


def check(params: TraceParams, config: DeployConfig) -> list[Issue]:
    """A TorchScript source is called with one tensor per declared input, positionally:
    a forward that wants anything else fails here, before any stage runs."""
    from stages._torchscript_sig import forward_args

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


_OUTPUT_HINT = (
    "The golden inputs do not exercise the model (e.g. an all-zero attention mask): "
    "give real inputs in model.golden_inputs (.npz keyed by input name) or change the inputs' value_range."
)


def _trace(model: Any, args: tuple[Any, ...]) -> Any:
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        return model  # already TorchScript (source: torchscript)
    with torch.no_grad():
        return torch.jit.trace(model, args, check_trace=False)


def _shapes(cases: dict[Any, Any]) -> dict[str, dict[str, list[int]]]:
    return {str(label): {k: list(v.shape) for k, v in case.outputs.items()} for label, case in cases.items()}


SPEC = StageSpec(
    name="trace",
    version=2,
    params=TraceParams,
    inputs=(SOURCE_ARTIFACT,),
    outputs=(Artifact("torchscript", filename="model.pt"), Artifact("golden", filename="golden.npz")),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "numpy"),
    check=check,
    description="TorchScript trace; records golden inputs and eager reference outputs",
)
