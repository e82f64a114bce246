"""A decoder as `deploy init` finds it: a model whose forward returns its key/value cache
(a transformers Cache, its `cache` or `past_key_values`, or `(logits, ((key, value), ...))`) gets a
config that exports it one step at a time with the cache as inputs and outputs
(`model.decoder`, deploy/modelio/decoder.py). A cache a flat past cannot express
(sliding-window, quantized, static layers) is refused by name. Imports torch lazily."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError
from deploy.starter.entries import InputEntry, input_entry

if TYPE_CHECKING:
    from deploy.spec.tensors import Decoder

PAST_DIM = "past_sequence"
# The longest past a written config declares where the model does not say its own.
DEFAULT_MAX_PAST = 1024
DEFAULT_NEW_TOKENS = (
    64  # spec.tensors.Decoder.max_new_tokens' default: written lower where the past is shorter
)
# Where configs say a model's positions (transformers' name first; GPT-2, MPT, Falcon, ...).
POSITION_FIELDS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "max_sequence_length",
    "seq_length",
    "n_ctx",
)


@dataclass(frozen=True)
class DecoderFound:
    layers: int
    heads: int  # key/value heads (fewer than the query heads with grouped-query attention)
    head_dim: int
    dtype: str
    cache: str  # spec.tensors.CacheConvention's value
    max_past: int  # the model's positions (POSITION_FIELDS, else DEFAULT_MAX_PAST)
    guessed: bool = False  # the model says no positions: max_past is DEFAULT_MAX_PAST


def found_decoder(model: Any, result: Any) -> DecoderFound | None:
    """The decoder `result` shows, or None where the model returned no cache."""
    from deploy.modelio.decoder import returned_cache

    cache = returned_cache(dict(result) if isinstance(result, Mapping) else result)
    if cache is not None and hasattr(cache, "layers"):
        return _from_layers(model, cache, "transformers")
    pairs = _pairs(cache) if cache is not None else _tuple_cache(result)
    return _found(model, pairs, "tuples") if pairs else None


def found_with_cache_on(model: Any, call: Callable[[], Any]) -> DecoderFound | None:
    """A decoder whose config turns its cache off (`use_cache=False`) answered without one;
    its export asks for the cache anyway (modelio/decoder.py), so init asks too: `call`
    again with the config's cache on. None where that finds none either."""
    config: Any = getattr(model, "config", None)
    if getattr(config, "use_cache", None) is not False:
        return None
    config.use_cache = True
    try:
        return found_decoder(model, call())
    except Exception:
        return None
    finally:
        config.use_cache = False


def uncached(model: Any) -> str:
    """Why a generative model that returned no key/value cache is written as one full
    forward per call ("" for a model that is not generative)."""
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder: its cache (self- and cross-attention) is not one deploy exports"
    if type(model).__name__.endswith(("ForCausalLM", "LMHeadModel")) or getattr(config, "is_decoder", False):
        return "a generative decoder that returned no key/value cache at the declared inputs"
    return ""


def _from_layers(model: Any, cache: Any, convention: str) -> DecoderFound:
    from deploy.modelio.decoder import PLAIN_LAYERS, unsupported

    odd = sorted({type(layer).__name__ for layer in cache.layers} - set(PLAIN_LAYERS))
    if odd:
        said = unsupported(type(cache).__name__, odd) + _window_hint(model)
        raise ConfigError("model", [Issue("model", said)])
    return _found(model, [(layer.keys, layer.values) for layer in cache.layers], convention)


def _window_hint(model: Any) -> str:
    """A window no position can leave (Mistral's default 4096 in a small config) is a plain
    cache in all but name: said, with the setting that makes it one."""
    config = getattr(model, "config", None)
    window, positions = (
        getattr(config, "sliding_window", None),
        getattr(config, "max_position_embeddings", None),
    )
    if isinstance(window, int) and isinstance(positions, int) and window >= positions:
        return (
            f"; here the config's sliding_window ({window}) is at least its max_position_embeddings "
            f"({positions}), so no position ever leaves the window: build it with sliding_window=None"
        )
    return ""


def _tuple_cache(result: Any) -> list[Any]:
    """((key, value), ...) as the second of (logits, past): 4-d tensors in pairs."""
    if not (isinstance(result, tuple) and len(result) == 2):
        return []
    return _pairs(result[1])


def _pairs(cache: Any) -> list[Any]:
    """((key, value), ...): 4-d tensors in pairs, in a tuple or list; [] for anything else."""
    if not isinstance(cache, (tuple, list)):
        return []
    pairs = list(cache)
    ok = all(
        isinstance(p, (tuple, list)) and len(p) == 2 and all(getattr(t, "ndim", 0) == 4 for t in p)
        for p in pairs
    )
    return pairs if pairs and ok else []


def _found(model: Any, pairs: list[Any], convention: str) -> DecoderFound:
    key = pairs[0][0]
    config = getattr(model, "config", None)
    said = [getattr(config, name) for name in POSITION_FIELDS if isinstance(getattr(config, name, None), int)]
    dtype = str(key.dtype).removeprefix("torch.")
    shape = len(pairs), int(key.shape[1]), int(key.shape[3])
    return DecoderFound(*shape, dtype, convention, said[0] if said else DEFAULT_MAX_PAST, not said)


def decoder_inputs(inputs: list[InputEntry], found: DecoderFound) -> list[InputEntry]:
    """input_ids as declared, then each layer's past key and value, [batch, heads,
    past_sequence, head_dim], from empty (the prefill) to the model's longest context."""
    if [i["name"] for i in inputs] != ["input_ids"]:
        said = ", ".join(i["name"] for i in inputs)
        raise ConfigError(
            "deploy init",
            [
                Issue(
                    "--input", f"a decoder takes input_ids alone (positions follow from its past); got {said}"
                )
            ],
        )
    ids = inputs[0]
    batch, seq = ids["dims"][0], ids["opt"][1]
    # The past and the new tokens share the model's positions: golden's max case feeds both.
    most = found.max_past - int(ids["max"][1])
    if most < 1:
        why = f"a max of {ids['max'][1]} tokens leaves no room for a past in the model's {found.max_past} positions"
        raise ConfigError("deploy init", [Issue("--input input_ids", f"{why}: give input_ids a smaller max")])
    found = replace(found, max_past=most)
    past = [
        input_entry(
            name,
            found.dtype,
            [batch, found.heads, PAST_DIM, found.head_dim],
            [ids["min"][0], found.heads, 0, found.head_dim],
            [ids["opt"][0], found.heads, min(seq, found.max_past), found.head_dim],
            [ids["max"][0], found.heads, found.max_past, found.head_dim],
        )
        for name in _decoder(found).past_names()
    ]
    return [ids, *past]


def decoder_outputs(found: DecoderFound) -> list[dict[str, str]]:
    return [{"name": "logits", "kind": "other"}] + [
        {"name": name, "kind": "other"} for name in _decoder(found).present_names()
    ]


def _decoder(found: DecoderFound) -> Decoder:
    from deploy.spec.tensors import Decoder

    return Decoder(layers=found.layers)
