"""What `deploy init` and `deploy.optimize` learn by calling the model before writing its
config. It is called with the shapes the user declared (a batched model at the smallest
batch of its opt shapes, so a detection model's list of per-image results is one
image's; a model without a batch dim at its opt shapes as they are), twice on the same
inputs: a forward that draws noise is refused naming the op and its line, NaN is named as
NaN with the inputs that produced it, and only then is it measured whether each output
is computed per sample or depends on the rest of its batch (such a model is written with
max_batch_size: 0). What it returns becomes the outputs: by key, NamedTuple field or
position, a cache's keys and values included. Imports torch and numpy inside the
functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploy.domain.issues import Issue
from deploy.gates.batch_independence import BatchIndependence, measure
from deploy.pipeline.errors import ConfigError, StageFailed
from deploy.starter.decoder_found import (
    DecoderFound,
    decoder_outputs,
    found_decoder,
    found_with_cache_on,
    uncached,
)

# Rows per image a detection config starts with (torchvision's models keep up to 100-300);
# more where the model returned more.
MAX_DETECTIONS = 100
COUNT = "num_detections"
# A cache's tensors (transformers' Cache: `<field>.layers.N.keys`): named as Optimum names
# a decoder's present key / values, in the identifiers a config takes.
CACHE_PATH = re.compile(r"(?:^|\.)layers\.(\d+)\.(keys|values)$")


@dataclass(frozen=True)
class Found:
    """One tensor the model returned, as an output entry."""

    name: str
    path: str | None  # None: the default (a lone tensor, or positions in order)
    shape: tuple[int, ...]
    kind: str


@dataclass(frozen=True)
class Findings:
    outputs: list[Found]
    detections: int  # rows per image to pad to; 0: the model returns tensors
    batching: BatchIndependence | None  # None: not measured (no batch dim, or detections)
    called_with: dict[str, tuple[list[int], str]]  # input -> (shape, dtype) of the call
    decoder: DecoderFound | None = None  # the model returned its key/value cache
    uncached: str = ""  # why a generative model is written as one full forward per call
    warning: str = ""  # what the written config's run will refuse, and the way out


def discover(
    result_tensors: list[tuple[str, tuple[int, ...], str]], batched: bool, taken: Sequence[str] = ()
) -> list[Found]:
    """Output entries for what the model returned (modelio.outputs.returned_tensors):
    named by key, NamedTuple field or position; a cache's keys / values as present_N_key /
    present_N_value, each with its path."""
    by_position = all(path.isdigit() for path, _, _ in result_tensors)
    found: list[Found] = []
    for index, (path, shape, dtype) in enumerate(result_tensors):
        name = _unused(_valid_name(_name(path, index, by_position)), [*taken, *(f.name for f in found)])
        keep_path = None if (by_position or not path or path == name) else path
        kind = _kind(name, shape, dtype, batched, len(result_tensors))
        found.append(Found(name, keep_path, shape, kind))
    return found


def _name(path: str, index: int, by_position: bool) -> str:
    cache = CACHE_PATH.search(path)
    if cache:
        return f"present_{cache.group(1)}_{cache.group(2)[:-1]}"
    if not path:
        return "output"
    return f"output{index}" if by_position else re.sub(r"[^A-Za-z0-9_]", "_", _ascii(path))


def _ascii(key: str) -> str:
    """Accents dropped (`é` -> `e`): Triton's names, and the config's, are ASCII."""
    import unicodedata

    return unicodedata.normalize("NFKD", key).encode("ascii", "ignore").decode() or "output"


def _unused(name: str, taken: list[str]) -> str:
    """A key that is also an input's name (a wrapper echoing `input_ids` back) or another
    output's: Triton names each tensor once, so it is written `<key>_out` (its path kept)."""
    if name not in taken:
        return name
    return next(f"{name}_out{n or ''}" for n in range(len(taken) + 1) if f"{name}_out{n or ''}" not in taken)


def _valid_name(name: str) -> str:
    return name if re.match(r"^[A-Za-z_]", name) else f"out_{name}"


def _kind(name: str, shape: tuple[int, ...], dtype: str, batched: bool, count: int) -> str:
    """A guess, marked as one in the file: class scores are [batch, classes] floats."""
    if not dtype.startswith(("float", "bfloat")):
        return "other"
    rank2 = len(shape) == 2 and (shape[1] >= 2) and batched
    if rank2 and ("logit" in name or "score" in name or count == 1):
        return "logits"
    if rank2 or any(word in name for word in ("embed", "pool", "hidden")):
        return "embedding"
    return "other"


def vocabulary(model: Any) -> int | None:
    """The size of the model's first embedding table (token ids and flat indices index
    it): the bound an integer input's values must stay below; None without one."""
    import torch

    kinds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    first = (
        next((m for m in model.modules() if isinstance(m, kinds)), None)
        if hasattr(model, "modules")
        else None
    )
    return int(first.num_embeddings) if first is not None else None


def inspect(model: Any, specs: Sequence[Any], batched: bool) -> Findings:
    """Calls `model` at the declared shapes (InputSpec `specs`) twice, then, for a
    batched model, at a batch of distinct samples against each sample alone."""
    import numpy as np

    from deploy.modelio import detections
    from deploy.modelio.adapter import ForwardRaised, probe
    from deploy.modelio.outputs import not_tensors, returned_tensors
    from deploy.spec.tensors import InputsBy

    names = tuple(s.name for s in specs)
    rng = np.random.default_rng(0)
    sample = _sample(specs, _shapes(specs, batched), rng)
    called = {n: (list(a.shape), str(a.dtype)) for n, a in sample.items()}
    try:
        result, _ = probe(model, names, InputsBy.AUTO, sample)
    except ForwardRaised as exc:
        raise ForwardRaised(f"{exc}{_why(model, specs, sample, names)}") from exc
    if detections.hint(result):
        return Findings(
            _detection_outputs(result), _rows(result), None, called, warning=_found_nothing(result)
        )
    decoder = found_decoder(model, result) or found_with_cache_on(
        model, lambda: probe(model, names, InputsBy.AUTO, sample)[0]
    )
    if decoder is not None:  # rows of a decoder's batch are separate sequences: not measured
        _refuse_noise_and_nan(model, names, sample, result)
        outputs = [Found(o["name"], None, (), o["kind"]) for o in decoder_outputs(decoder)]
        return Findings(outputs, 0, None, called, decoder)
    tensors = returned_tensors(result)
    _refuse_unheld(tensors)
    if not tensors:
        raise ConfigError("model", [Issue("model", "the model returned no tensors at the opt shapes")])
    _refuse_noise_and_nan(model, names, sample, result)
    found = discover(tensors, batched, names)
    batching = _batching(model, specs, names, rng) if batched else None
    if batching is not None:
        _refuse_zero_alone(model, specs, names, rng, {o.name for o in batching.dependent()})
    _at_max(model, specs, names, rng)
    left = not_tensors(result)
    said = (
        f"the forward also returns values no output can carry (not tensors), left out: {', '.join(left)}"
        if left
        else ""
    )
    return Findings(found, 0, batching, called, uncached=uncached(model), warning=said)


def _at_max(model: Any, specs: Sequence[Any], names: tuple[str, ...], rng: Any) -> None:
    """golden calls the model at the max shapes: one that cannot take them is refused here,
    naming them, not after init wrote a config its own run then failed at golden (a ViT
    given a larger image than its position table)."""
    from deploy.modelio.adapter import probe
    from deploy.spec.tensors import InputsBy

    sample = _sample(specs, {s.name: tuple(s.max) for s in specs}, rng)
    try:
        probe(model, names, InputsBy.AUTO, sample)
    except StageFailed as exc:
        shapes = ", ".join(f"{n} {list(a.shape)}" for n, a in sample.items())
        raise ConfigError(
            "--input",
            [Issue("--input", f"at the max shapes ({shapes}) the model raised: {exc}; give a max it takes")],
        ) from None


def _refuse_unheld(tensors: list[tuple[str, tuple[int, ...], str]]) -> None:
    """Complex and bfloat16 answers, named before a config is written (golden refuses them too)."""
    from deploy.runtimes.torchrt import COMPLEX_ADVICE, UNHELD_ADVICE

    for word, advice in (("complex", COMPLEX_ADVICE), ("bfloat16", UNHELD_ADVICE)):
        found = [f"{path or 'output'} ({dtype})" for path, _, dtype in tensors if word in dtype]
        if found:
            raise ConfigError("model", [Issue("model", f"{', '.join(found)}: {advice}")])


def _shapes(specs: Sequence[Any], batched: bool) -> dict[str, tuple[int, ...]]:
    """The opt shapes; a batched model's at the smallest batch any input takes."""
    if not batched:
        return {s.name: tuple(s.opt) for s in specs}
    batch = min(s.min[0] for s in specs)
    return {s.name: (batch, *s.opt[1:]) for s in specs}


def _sample(specs: Sequence[Any], shapes: Mapping[str, tuple[int, ...]], rng: Any) -> dict[str, Any]:
    from deploy.runtimes.arrays import inputs_at

    return inputs_at(specs, shapes, rng)


def _refuse_noise_and_nan(model: Any, names: tuple[str, ...], sample: Mapping[str, Any], result: Any) -> None:
    """A second call on the same inputs: noise is refused naming its op; then NaN named
    with the inputs that produced it."""
    import numpy as np

    from deploy.modelio import randomness
    from deploy.modelio.adapter import probe
    from deploy.modelio.outputs import flat
    from deploy.spec.tensors import InputsBy

    def answers() -> dict[str, Any]:
        again, _ = probe(model, names, InputsBy.AUTO, sample)
        return {path or "output": t.float().numpy() for path, t in flat(again).items()}

    first = {path or "output": t.float().numpy() for path, t in flat(result).items()}
    try:
        randomness.refuse_noise(randomness.repeat_spread(first, answers()), first, answers)
    except StageFailed as exc:
        raise ConfigError("model", [Issue("model", str(exc))]) from None
    bad = [name for name, a in first.items() if np.any(np.isnan(a))]  # ±inf is an answer (masked logits)
    if bad:
        shown = ", ".join(f"{n} {list(a.shape)} {a.dtype} in {a.min()}..{a.max()}" for n, a in sample.items())
        raise ConfigError(
            "model",
            [
                Issue(
                    "model",
                    f"the model answers NaN in {bad} for {shown}: it is not defined on these inputs; "
                    "give each input the values it takes (--value-range NAME=LOW,HIGH, --values NAME=KIND)",
                )
            ],
        )


def _why(model: Any, specs: Sequence[Any], sample: Mapping[str, Any], names: tuple[str, ...]) -> str:
    """What the declared --input got wrong, where the module that raised says (a dtype, the
    channels, the features), or an encoder-decoder's missing input."""
    from deploy.modelio.adapter import probe
    from deploy.modelio.probe import explain
    from deploy.spec.tensors import InputsBy

    issue = explain(model, specs, sample, lambda: probe(model, names, InputsBy.AUTO, sample))
    found = f"; --input {issue.message}" if issue is not None else ""
    return found + _encoder_decoder_hint(model, names)


def _encoder_decoder_hint(model: Any, names: tuple[str, ...]) -> str:
    """An encoder-decoder (T5, BART) called without decoder_input_ids raises in words about
    the input_ids it was given ("You must specify exactly one of input_ids or inputs_embeds")."""
    if "decoder_input_ids" in names or not getattr(
        getattr(model, "config", None), "is_encoder_decoder", False
    ):
        return ""
    return (
        "; the model is an encoder-decoder (its config's is_encoder_decoder), whose forward needs "
        "decoder_input_ids too: add --input decoder_input_ids:int64:1x1/1x4/1x8 (it is then written as "
        "one full forward per call: docs/how-to/decoders.md)"
    )


def _rows(result: Any) -> int:
    """Rows per image to pad to: MAX_DETECTIONS, or what the model returned where more."""
    from deploy.modelio import detections

    images = detections.per_image(result)
    most = max((len(next(iter(image.values()))) for image in images), default=0)
    return max(MAX_DETECTIONS, most)


def _found_nothing(result: Any) -> str:
    """A detector that found no object in any image init drew (untrained weights, or noise
    a trained one sees nothing in) answers padding alone, which golden refuses: said now,
    not after a config was written and run."""
    from deploy.modelio import detections

    if any(len(next(iter(image.values()), ())) for image in detections.per_image(result)):
        return ""
    return (
        "the detector found no object in any image init drew (noise at the opt shapes), so every answer "
        "was padding; golden refuses answers that compare nothing. Give trained weights (--kwarg, or "
        "model.checkpoint) and real images (model.golden_inputs: an .npz keyed by input name)"
    )


def _detection_outputs(result: Any) -> list[Found]:
    """One output per key of the per-image dicts, padded, and the per-image count."""
    from deploy.modelio import detections
    from deploy.spec.tensors import Detections

    padded = detections.padded(result, Detections(max_detections=_rows(result), count=COUNT))
    return [Found(k, None, tuple(v.shape), "other") for k, v in padded.items()]


def _refuse_zero_alone(
    model: Any, specs: Sequence[Any], names: tuple[str, ...], rng: Any, dependent: set[str]
) -> None:
    """golden refuses an output that depends on the rest of its batch and is all zeros for
    a batch of one (`y - y.mean(0)`): init wrote such a config and its run refused it."""
    from deploy.modelio.adapter import probe
    from deploy.modelio.outputs import flat
    from deploy.pipeline.errors import UsageError
    from deploy.spec.tensors import InputsBy

    if not dependent or min(s.min[0] for s in specs) > 1:
        return
    sample = _sample(specs, {s.name: (1, *s.min[1:]) for s in specs}, rng)
    result, _ = probe(model, names, InputsBy.AUTO, sample)
    zero = [
        path or "output"
        for path, t in flat(result).items()
        if (path or "output") in dependent and not t.any()
    ]
    if zero:
        raise UsageError(
            "--input",
            [
                Issue(
                    f"--input {specs[0].name}",
                    f"output '{zero[0]}' depends on the rest of its batch and is all zeros for a batch of one, which no "
                    "converted answer can be judged against: give the batch dim a min of 2 or more",
                )
            ],
        )


def _batching(model: Any, specs: Sequence[Any], names: tuple[str, ...], rng: Any) -> BatchIndependence:
    """The same measurement golden makes: a batch of distinct samples against each alone."""
    from deploy.modelio.adapter import probe
    from deploy.modelio.outputs import flat
    from deploy.spec.tensors import InputsBy

    batch = min(max(2, *(s.opt[0] for s in specs)), min(s.max[0] for s in specs))
    sample = _sample(specs, {s.name: (batch, *s.opt[1:]) for s in specs}, rng)

    def infer(feeds: Mapping[str, Any]) -> dict[str, Any]:
        result, _ = probe(model, names, InputsBy.AUTO, feeds)
        return {path or "output": t.float().numpy() for path, t in flat(result).items()}

    try:
        return measure(infer, sample, infer(sample))
    except StageFailed as exc:  # a model that cannot take this batch: said, not measured
        raise ConfigError("model", [Issue("model", f"at batch {batch}: {exc}")]) from None
