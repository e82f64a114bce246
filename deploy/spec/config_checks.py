"""The config's checks across fields that one model alone cannot make: names, shared
dims and the batch dim across inputs, the model section's names against the declared
tensors, a decoder's inputs and outputs. The engine runs them with every other config
error, up front (pipeline/graph/project.py)."""

from __future__ import annotations

from deploy.domain.issues import Issue
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import InputSpec


def shape_issues(config: DeployConfig) -> list[Issue]:
    """Checks across inputs that one InputSpec alone cannot make."""
    issues = _name_issues(config) + _shared_dim_issues(config.inputs) + _batch_issues(config)
    return issues + _bound_issues(config) + _model_io_issues(config)


def _model_io_issues(config: DeployConfig) -> list[Issue]:
    """The model section's names against the declared inputs and outputs."""
    issues = [
        Issue(f"model.forward_kwargs.{name}", "is a model input (under inputs): it cannot also be fixed")
        for name in config.model.forward_kwargs
        if name in config.input_names()
    ]
    issues += _decoder_issues(config)
    found = config.model.detections
    if found is not None and found.count not in config.output_names():
        issues.append(
            Issue(
                "model.detections.count",
                f"'{found.count}' is not among outputs {config.output_names()}: declare it "
                f"(- {{name: {found.count}}}), the per-image number of valid rows",
            )
        )
    return issues


def _decoder_issues(config: DeployConfig) -> list[Issue]:
    """A decoder's tensors are its cache's: input_ids and the past in, logits and the present out."""
    decoder = config.model.decoder
    if decoder is None:
        return []
    inputs, outputs = ["input_ids", *decoder.past_names()], ["logits", *decoder.present_names()]
    issues = []
    if config.input_names() != inputs:
        issues.append(
            Issue("inputs", f"a decoder with {decoder.layers} layers takes, in order: {', '.join(inputs)}")
        )
    if config.output_names() != outputs:
        issues.append(
            Issue(
                "outputs", f"a decoder with {decoder.layers} layers returns, in order: {', '.join(outputs)}"
            )
        )
    if config.model.detections is not None:
        issues.append(
            Issue("model.decoder", "a decoder returns no detections: set one of decoder / detections")
        )
    return issues + _one_token_steps(config) + _one_sequence_requests(config) + _context_room(config)


def _one_sequence_requests(config: DeployConfig) -> list[Issue]:
    """The generate models feed one sequence a request: a batch fixed above 1 passed every
    gate (they feed whole batches) and failed only at smoke, in ONNX Runtime's words."""
    ids = next((s for s in config.inputs if s.name == "input_ids"), None)
    if ids is None or not ids.dims or not isinstance(ids.dims[0], int) or ids.dims[0] == 1:
        return []
    return [
        Issue(
            "inputs[0].dims",
            f"a decoder's generate models feed one sequence a request, but input_ids' batch is fixed at "
            f"{ids.dims[0]}: give it 1, or a dim name (min 1) as `deploy init --input input_ids:int64:1x1/...` writes",
        )
    ]


def _context_room(config: DeployConfig) -> list[Issue]:
    """max_new_tokens beyond the context the step is exported for: every request that
    asked for it was refused at the server, while smoke (which asks for fewer) passed."""
    decoder = config.model.decoder
    past = config.inputs[1] if decoder is not None and len(config.inputs) > 1 else None
    if decoder is None or past is None or len(past.max) < 3 or decoder.max_new_tokens <= past.max[2]:
        return []
    return [
        Issue(
            "model.decoder.max_new_tokens",
            f"{decoder.max_new_tokens} new tokens do not fit the context the step is exported for "
            f"(the past's max {past.max[2]}, plus the token that follows it): at most {past.max[2]}",
        )
    ]


def _one_token_steps(config: DeployConfig) -> list[Issue]:
    """Each decode step feeds one new token: a sequence dim that cannot be 1 passed every
    gate (they feed the prompt) and failed only at smoke, in ONNX Runtime's words."""
    ids = next((s for s in config.inputs if s.name == "input_ids"), None)
    if ids is None or len(ids.dims) < 2 or not isinstance(ids.dims[1], int) or ids.dims[1] == 1:
        return []  # a named sequence dim: ONNX Runtime and OpenVINO take one token whatever its min
    return [
        Issue(
            "inputs[0].dims",
            f"a decoder's steps feed one token, but input_ids' sequence is fixed at {ids.dims[1]}: "
            "give it a dim name and min 1 (deploy.optimize: dynamic={'input_ids': {1: 'sequence'}})",
        )
    ]


def _name_issues(config: DeployConfig) -> list[Issue]:
    names = [s.name for s in config.inputs] + [s.name for s in config.outputs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    return [Issue("inputs/outputs", f"tensor name '{n}' is used more than once") for n in dupes]


def _shared_dim_issues(inputs: tuple[InputSpec, ...]) -> list[Issue]:
    """A dim name shared by several inputs must have the same min/opt/max everywhere."""
    seen: dict[str, tuple[str, tuple[int, int, int]]] = {}
    issues = []
    for index, spec in enumerate(inputs):
        for axis, dim in spec.dynamic_axes().items():
            rng = (spec.min[axis], spec.opt[axis], spec.max[axis])
            first = seen.setdefault(dim, (spec.name, rng))
            if first[1] != rng:
                issues.append(
                    Issue(
                        f"inputs[{index}]",
                        f"dim '{dim}' is {first[1]} (min/opt/max) in input '{first[0]}' but {rng} in input '{spec.name}'",
                    )
                )
    return issues


def _batch_issues(config: DeployConfig) -> list[Issue]:
    if config.batch_dim is None:
        return []
    return [
        Issue(f"inputs[{index}].dims", _not_batched(spec.dims, config.batch_dim))
        for index, spec in enumerate(config.inputs)
        if not spec.dims or spec.dims[0] != config.batch_dim
    ]


def _not_batched(dims: tuple[int | str, ...], batch: str) -> str:
    if not dims:  # Triton gives every input of a batched model its batch dim
        return (
            f"a 0-d input cannot travel in a model batched over '{batch}': declare it dims: [{batch}] (one value "
            "per sample) if the model takes that, or set batch_dim: null for a model without batching"
        )
    return (
        f"axis 0 must be the batch dim '{batch}' (got {dims[0]!r}); "
        "or set batch_dim: null for a model without batching"
    )


def _bound_issues(config: DeployConfig) -> list[Issue]:
    """lengths / indices / offsets name the dim whose size bounds them: a dim some input has."""
    dims = {dim for spec in config.inputs for dim in spec.dynamic_axes().values()}
    return [
        Issue(
            f"inputs[{index}].of", f"'{spec.of}' is no dynamic dim of the inputs (they have {sorted(dims)})"
        )
        for index, spec in enumerate(config.inputs)
        if spec.of is not None and spec.of not in dims
    ]
