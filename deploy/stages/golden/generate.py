"""golden's generations for a decoder: greedy tokens after prompts of varied lengths,
from transformers' own `generate` where the model has one, else a plain eager loop over
the same step the graph was exported from (serving/decode_loop.py over eager PyTorch)."""

from __future__ import annotations

from typing import Any

from deploy.gates.generations import Generation, Generations, random_prompts
from deploy.spec.config import DeployConfig

NEW_TOKENS = 16  # per prompt, or the decoder's max_new_tokens where fewer


def eager(step: Any, config: DeployConfig, rng: Any) -> Generations:
    """Greedy generations of the eager model (`step`: modelio.decoder.CacheStep)."""
    if config.model.decoder is None:
        return Generations()
    new = min(NEW_TOKENS, config.model.decoder.max_new_tokens)
    inner = step.model
    if hasattr(inner, "generate") and hasattr(inner, "generation_config"):
        stop = _eos(inner.generation_config.eos_token_id)
        cases = [Generation(prompt=p, tokens=_hf(inner, p, new)) for p in random_prompts(config, rng)]
        return Generations(how="transformers generate", stop=stop, max_new_tokens=new, cases=cases)
    cases = [Generation(prompt=p, tokens=_loop(step, config, p, new)) for p in random_prompts(config, rng)]
    return Generations(how="eager loop", stop=[], max_new_tokens=new, cases=cases)


def _eos(found: Any) -> list[int]:
    if found is None:
        return []
    return [int(t) for t in (found if isinstance(found, (list, tuple)) else [found])]


def _hf(model: Any, prompt: list[int], new: int) -> list[int]:
    import torch

    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False)
    return [int(t) for t in out[0, len(prompt) :]]


def _loop(step: Any, config: DeployConfig, prompt: list[int], new: int) -> list[int]:
    import torch

    from deploy.serving.decode_loop import CacheShape, Sampling, generate

    decoder, key = config.model.decoder, config.inputs[1]
    assert decoder is not None
    cache = CacheShape(decoder.layers, key.opt[1], key.opt[3], key.dtype, decoder.past_names())

    def run(feeds: dict[str, Any]) -> list[Any]:
        args = [torch.from_numpy(feeds[n]) for n in ["input_ids", *decoder.past_names()]]
        with torch.no_grad():
            return [t.numpy() for t in step(*args)]

    return generate(run, prompt, cache, Sampling(max_new_tokens=new))
