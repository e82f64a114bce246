"""A causal decoder as one step with its key/value cache: `forward(input_ids, *past)` ->
`(logits, *present)`, the flat tensors a graph can take and return (config `model.decoder`).

The past arrives as key/value pairs per layer, [batch, kv_heads, past, head_dim], and may be
empty (the prefill); positions continue from its length. A transformers model gets it as a
DynamicCache, whose layers must all be plain ones: a sliding-window, quantized or static
cache keeps or drops entries by rules a flat past cannot carry, so it is refused by name.

Imported only from inside stage run functions: it imports torch at module level.
"""

from __future__ import annotations

from typing import Any

import torch

from deploy.pipeline.errors import StageFailed
from deploy.spec.tensors import CacheConvention, Decoder

PLAIN_LAYERS = ("DynamicLayer",)  # transformers' cache layers a flat past expresses


class CacheStep(torch.nn.Module):
    """One decoding step of `model` over flat past tensors (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, decoder: Decoder):
        super().__init__()
        self.model, self.decoder = model, decoder

    def forward(self, input_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if len(past) != 2 * self.decoder.layers:
            raise StageFailed(
                f"a decoder with {self.decoder.layers} layers takes {2 * self.decoder.layers} past tensors"
            )
        if self.decoder.cache is CacheConvention.TUPLES:
            return self._tuples(input_ids, past)
        return self._transformers(input_ids, past)

    def _tuples(self, input_ids: torch.Tensor, past: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(self.decoder.layers))
        logits, present = _logits_and_cache(self.model(input_ids, pairs))
        return (logits, *(t for pair in present for t in pair))

    def _transformers(
        self, input_ids: torch.Tensor, past: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        cache = DynamicCache(config=getattr(self.model, "config", None))
        for i in range(self.decoder.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        batch, seq = input_ids.shape
        done = past[0].shape[2]
        positions = (torch.arange(seq, device=input_ids.device) + done).unsqueeze(0).expand(batch, -1)
        mask = torch.ones(batch, done + seq, dtype=torch.long, device=input_ids.device)
        # transformers 5 names the cache `cache`; earlier releases `past_key_values`.
        takes = "cache" if "cache" in _parameters(self.model) else "past_key_values"
        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, **{takes: cache}
        )
        return (out.logits, *flat_cache(returned_cache(out)))


def _parameters(model: torch.nn.Module) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def _logits_and_cache(result: Any) -> tuple[Any, Any]:
    """(logits, past) as returned, or from a dict / ModelOutput's `logits` and its cache."""
    if isinstance(result, tuple):
        logits, present = result
        return logits, present
    logits = result.get("logits") if isinstance(result, dict) else getattr(result, "logits", None)
    if logits is None:
        raise StageFailed(f"the decoder answered a {type(result).__name__} without `logits` beside its cache")
    return logits, returned_cache(result)


def returned_cache(result: Any) -> Any:
    """The cache in a model's result: its `cache` (transformers 5) or `past_key_values`
    field or key; None where it returned none."""
    for name in ("cache", "past_key_values"):
        if isinstance(result, dict):
            found = result.get(name)
        else:
            found = (
                getattr(result, name, None) if name in getattr(result, "__dataclass_fields__", {}) else None
            )
        if found is not None:
            return found
    return None


def flat_cache(cache: Any) -> list[torch.Tensor]:
    """keys and values per layer, in order; a cache a flat past cannot express is refused."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise StageFailed(
            f"the decoder returned a {type(cache).__name__} as its cache: expected a transformers Cache"
        )
    odd = sorted({type(layer).__name__ for layer in layers} - set(PLAIN_LAYERS))
    if odd:
        raise StageFailed(unsupported(type(cache).__name__, odd))
    return [t for layer in layers for t in (layer.keys, layer.values)]


def unsupported(cache: str, layers: list[str]) -> str:
    return (
        f"the decoder's cache is a {cache} with {', '.join(layers)} layers: only plain DynamicCache layers "
        "(every past position kept) can be exported as past_key_values inputs; a sliding-window, chunked, "
        "quantized or static cache keeps positions by rules a flat past does not carry"
    )


def with_cache(model: torch.nn.Module, decoder: Decoder | None) -> torch.nn.Module:
    return model if decoder is None else CacheStep(model, decoder).eval()
