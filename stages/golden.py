"""golden: the inputs at the min / opt / max shapes and the eager model's outputs on them.

Every converting stage (trace, export, simplify, validate, smoke, ...) compares against
these, so a parity number always means "distance from what PyTorch computed". Implied:
added with its defaults to any config whose stages read `golden`, so neither trace nor
a TorchScript artifact is needed to get references (the torch.export path runs without).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.config import LABELS
from pipeline.contract import SOURCE_ARTIFACT, Artifact, Phase, Section, StageContext, StageSpec


class GoldenParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


_OUTPUT_HINT = (
    "The golden inputs do not exercise the model (e.g. an all-zero attention mask): "
    "give real inputs in model.golden_inputs (.npz keyed by input name) or change the inputs' value_range."
)


def run(ctx: StageContext, params: GoldenParams) -> None:
    import numpy as np

    from gates import references
    from modelio.loading import load_adapted
    from runtimes.torchrt import TorchModule

    config = ctx.config
    inputs = references.golden_inputs(config, np.random.default_rng(config.model.seed))
    eager = TorchModule(load_adapted(config, inputs["opt"]), config.input_names(), config.output_names())
    cases = {label: references.Case(inputs[label], eager.infer(inputs[label])) for label in LABELS}
    ctx.log.info("reference outputs: %s", _shapes(cases))
    references.refuse_constant(
        "reference output", {lb: case.outputs for lb, case in cases.items()}, _OUTPUT_HINT
    )
    ctx.headline(
        "outputs " + ", ".join(f"{k} {list(v.shape)}" for k, v in cases["opt"].outputs.items()) + " at opt"
    )
    references.save(ctx.output("golden"), cases)


def _shapes(cases: dict[Any, Any]) -> dict[str, dict[str, list[int]]]:
    return {str(label): {k: list(v.shape) for k, v in case.outputs.items()} for label, case in cases.items()}


SPEC = StageSpec(
    name="golden",
    version=1,
    params=GoldenParams,
    inputs=(SOURCE_ARTIFACT,),
    outputs=(Artifact("golden", filename="golden.npz"),),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "numpy"),
    description="golden inputs at min / opt / max and the eager model's reference outputs",
    phase=Phase.CONVERT,
    implied=True,
    timeout_s=1800,
)
