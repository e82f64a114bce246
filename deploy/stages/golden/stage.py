"""golden: the inputs at every golden case and the eager model's answers on them.

Every converting stage (trace, export, simplify, validate, smoke, ...) compares against
these, so a parity number always means "distance from what PyTorch computed". The cases:
min / opt / max (the shape spec's), shapes drawn inside [min, max], and the opt inputs
at the edges of their values (gates/cases.py). Before any answer is kept, eager is called
twice on the same inputs (a forward that draws noise is named, with the op and line
that draws it), NaN is named as NaN, and only then is batch independence measured;
answers that stay the same, bit for bit, when the inputs change make the stage partial, saying so.
eager.json records the cases' shapes, the repeat's spread, and eager float32 against
float64 (the size of rounding, which parity diagnoses read). Implied: added with its
defaults to any config whose stages read `golden`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from deploy.domain.artifacts import BATCHING, EAGER, GENERATIONS, GOLDEN
from deploy.gates.batch_independence import BatchIndependence, measure, not_measured
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import SOURCE_ARTIFACT, Artifact, Phase, Section, StageContext, StageSpec
from deploy.stages.golden.params import GoldenParams

if TYPE_CHECKING:
    import numpy as np
    import torch

    from deploy.gates.batch_independence import Arrays
    from deploy.gates.eager_record import EagerRecord
    from deploy.gates.references import Golden
    from deploy.modelio.adapter import IOAdapter
    from deploy.runtimes.torchrt import TorchModule
    from deploy.spec.config import DeployConfig


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
    from deploy.stages.golden import answers

    config = ctx.config
    plan = references.Plan(params.sampled_shapes, params.edges)
    inputs = references.golden_inputs(config, np.random.default_rng(config.model.seed), plan)
    model = load_model(config.model)
    checked(
        model, config, inputs["min"]
    )  # the probe (`deploy validate --probe`): config mistakes named first
    adapter = checked(model, config, inputs["opt"])
    eager = TorchModule(adapter, config.input_names(), config.output_names())
    golden = {name: references.Case(feeds, _answer(eager, name, feeds)) for name, feeds in inputs.items()}
    _generations(ctx, model)
    spread = _deterministic(eager, golden)
    answers.refuse_non_finite(golden, config.batch_dim is not None)
    answers.refuse_empty(golden, config.batch_dim is not None)
    golden, dropped = answers.usable_edges(golden, [n for n in inputs if n not in answers.primary(golden)])
    ctx.log.info("reference outputs: %s", _shapes(golden))
    batching = _batching(config, golden, eager.infer)
    ctx.output(BATCHING).write_text(json.dumps(batching.to_json(), indent=1))
    _judge_answers(ctx, golden, batching)
    # Each concurrent client's request gets the eager answer for exactly its own rows.
    clients = references.client_inputs(inputs, config.batch_dim is not None)
    references.save(ctx.output(GOLDEN), golden, [references.Case(c, eager.infer(c)) for c in clients])
    record = _record(ctx, adapter, golden, spread, dropped)
    ctx.output(EAGER).write_text(json.dumps(record.to_json(), indent=1))
    _say(ctx, golden, batching, record)


def _judge_answers(ctx: StageContext, golden: Golden, batching: BatchIndependence) -> None:
    """Answers constant at every shape refused; answers the same whatever the inputs said (partial)."""
    from deploy.gates import references
    from deploy.stages.golden import answers

    references.refuse_constant(
        "reference output",
        {lb: golden[lb].outputs for lb in ("min", "opt", "max")},
        _output_hint(batching),
        everywhere=True,
    )
    answers.refuse_centred_at_one(golden, {o.name for o in batching.dependent()})
    if blind := answers.input_blind(golden):
        ctx.log.warning(blind)
        ctx.partial(blind)


def _answer(eager: TorchModule, case: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Eager's answer at one case; a forward that raises there is named with the case and
    its shapes (a max beyond the model's positions raised "index 130 is out of bounds")."""
    try:
        return eager.infer(feeds)
    except StageFailed as exc:  # its own type kept (exit codes and hints follow it)
        from deploy.gates.cases import SAMPLE

        shapes = ", ".join(f"{n} {list(a.shape)}" for n, a in feeds.items())
        drawn = (
            "; a shape drawn between min and max, not one declared: the model takes only some sizes there "
            "(stages.golden.sampled_shapes: 0 draws none; or make min, opt and max the sizes it takes)"
            if case.startswith(SAMPLE)
            else ""
        )
        exc.args = (f"at {case} ({shapes}): {exc}{drawn}", *exc.args[1:])
        raise


def _deterministic(eager: TorchModule, golden: Golden) -> dict[str, float]:
    """Eager called again at opt: its spread per output, or NotDeterministic naming the
    outputs, the random ops and the ways out."""
    from deploy.modelio import randomness

    case = golden["opt"]
    spread = randomness.repeat_spread(case.outputs, eager.infer(case.inputs))
    randomness.refuse_noise(spread, case.outputs, lambda: eager.infer(case.inputs))
    return spread


def _record(
    ctx: StageContext, adapter: IOAdapter, golden: Golden, spread: dict[str, float], dropped: dict[str, str]
) -> EagerRecord:
    from deploy.gates.eager_record import EagerRecord, Rounding
    from deploy.modelio import rounding
    from deploy.stages.golden import answers

    cut = answers.truncated(adapter, golden)
    for found in cut:
        ctx.log.warning(
            "at %s eager returned %s detections per image; model.detections keeps %d",
            found.case,
            found.found,
            found.kept,
        )
    # At opt only (one float64 forward): rounding scales with the outputs, so a diagnosis at
    # another case reads it relative to that case's scale (gates/diagnosis.py).
    opt = golden["opt"]
    measured, note = rounding.measure(adapter, {"opt": (opt.inputs, opt.outputs)})
    wide = {case: {out: Rounding(*pair) for out, pair in outs.items()} for case, outs in measured.items()}
    shapes = {n: {k: list(v.shape) for k, v in c.inputs.items()} for n, c in golden.items()}
    return EagerRecord(shapes, spread, wide, note, dropped, cut)


def _say(ctx: StageContext, golden: Golden, batching: BatchIndependence, record: EagerRecord) -> None:
    """The headline: output shapes, what the inputs were, whether outputs are per sample;
    the cases' shapes and what was left out in the summary."""
    from deploy.stages.golden import answers

    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in golden["opt"].outputs.items())
    source = (
        "given inputs (model.golden_inputs)"
        if ctx.config.model.golden_inputs
        else "random inputs (real ones: model.golden_inputs)"
    )
    ctx.record("inputs", source)
    ctx.record("batching", batching.text())
    ctx.record("cases", record.shapes)
    if record.dropped:
        ctx.record("edge_cases_left_out", record.dropped)
    cut = [f"{t.case}: {max(t.found)} found, {t.kept} kept" for t in record.truncated]
    if cut:
        ctx.record("detections_cut", cut)
    more = f"; detections cut to max_detections ({', '.join(cut)})" if cut else ""
    if infinite := answers.infinities(golden):
        ctx.record("infinities", infinite)
        more += f"; {infinite}"
    ctx.headline(f"outputs {shapes} at opt, {len(golden)} cases, {source}; {batching.text()}{more}")


def _generations(ctx: StageContext, model: torch.nn.Module) -> None:
    """A decoder's greedy generations, the tokens served ones must equal; empty otherwise."""
    import numpy as np

    from deploy.stages.golden.generate import eager, not_applied

    record = eager(model, ctx.config, np.random.default_rng(ctx.config.model.seed + 1))
    record.write(ctx.output(GENERATIONS))
    if record.cases:
        lengths = ", ".join(str(len(c.prompt)) for c in record.cases)
        ctx.record(
            "generations", f"{len(record.cases)} prompts ({lengths} tokens), {record.how}, plain greedy"
        )
    found = getattr(getattr(model, "model", None), "generation_config", None)
    if record.cases and found is not None and (skipped := not_applied(found)):
        said = ", ".join(f"{k} {v}" for k, v in skipped.items())
        told = f"the model's generation_config asks for {said}: generation here and served is plain greedy"
        ctx.log.warning(told)
        ctx.record("generation_config_not_applied", told)
        ctx.partial(told)


def _output_hint(batching: BatchIndependence) -> str:
    """A batch-centred output is constant (zeros) for a batch of one sample: that is the
    model, not the inputs, and the fix is the batch range."""
    if not batching.dependent():
        return _OUTPUT_HINT
    return (
        f"{batching.text()}: for a batch of one such an output can be constant by construction; give the "
        "batch dim a min of 2 or more (inputs[].min), and serve it with stages.triton_config.max_batch_size: 0"
    )


def _batching(config: DeployConfig, golden: Golden, infer: Callable[[Arrays], Arrays]) -> BatchIndependence:
    """Measured on the largest-but-one batch that has two samples or more: opt, else max."""
    batch = config.batch_range()
    if batch is None:
        return not_measured("the model has no batch dim (batch_dim: null)")
    case = golden["opt"] if batch[1] >= 2 else golden["max"]
    return measure(infer, case.inputs, case.outputs)


def _shapes(golden: Golden) -> dict[str, dict[str, list[int]]]:
    return {str(label): {k: list(v.shape) for k, v in case.outputs.items()} for label, case in golden.items()}


SPEC = StageSpec(
    name="golden",
    # 10: eager without PyTorch's MHA fast path where the model has its modules (modelio/loading.py: padded positions were zeros); 9: each edge of a normal input draws its own magnitudes (an even function differs there); 8: a decoder's generations plain greedy (none of its generation_config's processors), within the served context; 7: ±inf in an answer compared by equality (masked logits), only NaN refused; 6: answers that do not depend on the input values named (partial); 5: a decoder's eager generations; 4: sampled shapes and value edges, eager twice (determinism), NaN named, eager.json
    # (float64 rounding); 3: inputs bind by name; 2: concurrent clients, batching.json
    version=10,
    params=GoldenParams,
    inputs=(SOURCE_ARTIFACT,),
    outputs=(
        Artifact("golden", filename="golden.npz"),
        Artifact("batching", filename="batching.json"),
        Artifact("eager", filename="eager.json"),
        Artifact("generations", filename="generations.json"),
    ),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "numpy"),
    description="golden inputs at min / opt / max, sampled shapes and value edges; the eager model's outputs; "
    "determinism, NaN, batch independence, float64 rounding",
    phase=Phase.CONVERT,
    implied=True,
    timeout_s=1800,
)
