"""golden: the inputs at the min / opt / max shapes and the eager model's outputs on them.

Every converting stage (trace, export, simplify, validate, smoke, ...) compares against
these, so a parity number always means "distance from what PyTorch computed". Implied:
added with its defaults to any config whose stages read `golden`, so neither trace nor
a TorchScript artifact is needed to get references (the torch.export path runs without).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from deploy.gates.batch_independence import BatchIndependence, measure, not_measured
from deploy.pipeline.contract import SOURCE_ARTIFACT, Artifact, Phase, Section, StageContext, StageSpec
from deploy.spec.tensors import LABELS

if TYPE_CHECKING:
    from deploy.gates.batch_independence import Arrays
    from deploy.gates.references import Golden
    from deploy.spec.config import DeployConfig


class GoldenParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


_OUTPUT_HINT = (
    "The golden inputs do not exercise the model (e.g. an all-zero attention mask): "
    "give real inputs in model.golden_inputs (.npz keyed by input name) or change the inputs' value_range; "
    "or its weights do not (an untrained head scoring every class alike): give model.checkpoint."
)


def run(ctx: StageContext, params: GoldenParams) -> None:
    import numpy as np

    from deploy.gates import references
    from deploy.modelio.loading import load_model
    from deploy.modelio.probe import checked
    from deploy.runtimes.torchrt import TorchModule

    config = ctx.config
    inputs = references.golden_inputs(config, np.random.default_rng(config.model.seed))
    model = load_model(config.model)
    checked(
        model, config, inputs["min"]
    )  # the probe (`deploy validate --probe`): config mistakes named first
    eager = TorchModule(checked(model, config, inputs["opt"]), config.input_names(), config.output_names())
    cases = {label: references.Case(inputs[label], eager.infer(inputs[label])) for label in LABELS}
    ctx.log.info("reference outputs: %s", _shapes(cases))
    batching = _batching(config, cases, eager.infer)
    ctx.output("batching").write_text(json.dumps(batching.to_json(), indent=1))
    references.refuse_constant(
        "reference output", {lb: case.outputs for lb, case in cases.items()}, _output_hint(batching)
    )
    # Each concurrent client's request gets the eager answer for exactly its own rows.
    clients = references.client_inputs(inputs, config.batch_dim is not None)
    references.save(ctx.output("golden"), cases, [references.Case(c, eager.infer(c)) for c in clients])
    _say(ctx, cases, batching)


def _say(ctx: StageContext, cases: Golden, batching: BatchIndependence) -> None:
    """The headline: output shapes, what the inputs were, whether outputs are per sample."""
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in cases["opt"].outputs.items())
    source = (
        "given inputs (model.golden_inputs)"
        if ctx.config.model.golden_inputs
        else "random inputs (real ones: model.golden_inputs)"
    )
    ctx.record("inputs", source)
    ctx.record("batching", batching.text())
    ctx.headline(f"outputs {shapes} at opt, {source}; {batching.text()}")


def _output_hint(batching: BatchIndependence) -> str:
    """A batch-centred output is constant (zeros) for a batch of one sample: that is the
    model, not the inputs, and the fix is the batch range."""
    if not batching.dependent():
        return _OUTPUT_HINT
    return (
        f"{batching.text()}: for a batch of one such an output can be constant by construction; give the "
        "batch dim a min of 2 or more (inputs[].min), and serve it with stages.triton_config.max_batch_size: 0"
    )


def _batching(config: DeployConfig, cases: Golden, infer: Callable[[Arrays], Arrays]) -> BatchIndependence:
    """Measured on the largest-but-one batch that has two samples or more: opt, else max."""
    batch = config.batch_range()
    if batch is None:
        return not_measured("the model has no batch dim (batch_dim: null)")
    case = cases["opt"] if batch[1] >= 2 else cases["max"]
    return measure(infer, case.inputs, case.outputs)


def _shapes(cases: Golden) -> dict[str, dict[str, list[int]]]:
    return {str(label): {k: list(v.shape) for k, v in case.outputs.items()} for label, case in cases.items()}


SPEC = StageSpec(
    name="golden",
    version=3,  # 2: concurrent clients' requests in golden.npz, batching.json; 3: inputs bind by name
    params=GoldenParams,
    inputs=(SOURCE_ARTIFACT,),
    outputs=(Artifact("golden", filename="golden.npz"), Artifact("batching", filename="batching.json")),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "numpy"),
    description="golden inputs at min / opt / max, concurrent clients' requests, the eager model's outputs; batch independence",
    phase=Phase.CONVERT,
    implied=True,
    timeout_s=1800,
)
