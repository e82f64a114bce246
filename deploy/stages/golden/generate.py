"""golden's generations for a decoder: greedy tokens after prompts of varied lengths,
from transformers' own `generate` where the model has one, else a plain eager loop over
the same step the graph was exported from (serving/decode_loop.py over eager PyTorch)."""

from __future__ import annotations

from typing import Any

from deploy.gates.generations import Generation, Generations, random_prompts
from deploy.spec.config import DeployConfig

NEW_TOKENS = 16  # per prompt, or the decoder's max_new_tokens where fewer


def eager(step: Any, config: DeployConfig, rng: Any) -> Generations:
    """Greedy generations of the eager model (`step`: modelio.decoder.CacheStep), within
    the context the served step is exported for (its past's max, plus one)."""
    if config.model.decoder is None:
        return Generations()
    prompts = random_prompts(config, rng)
    new = min(NEW_TOKENS, config.model.decoder.max_new_tokens, _room(config, prompts))
    inner = step.model
    if hasattr(inner, "generate") and hasattr(inner, "generation_config"):
        stop = _eos(inner.generation_config.eos_token_id)
        cases = [Generation(prompt=p, tokens=_hf(inner, p, new)) for p in prompts]
        return Generations(how="transformers generate", stop=stop, max_new_tokens=new, cases=cases)
    cases = [Generation(prompt=p, tokens=_loop(step, config, p, new)) for p in prompts]
    return Generations(how="eager loop", stop=[], max_new_tokens=new, cases=cases)


def _room(config: DeployConfig, prompts: list[list[int]]) -> int:
    """New tokens the longest prompt leaves in the served context (the past's max + 1)."""
    from deploy.domain.issues import Issue
    from deploy.pipeline.errors import ConfigError

    decoder = config.model.decoder
    assert decoder is not None
    index, past = next((i, s) for i, s in enumerate(config.inputs) if s.name == decoder.past_names()[0])
    room = past.max[2] + 1 - max(len(p) for p in prompts)
    if room < 1:
        longest = max(len(p) for p in prompts)
        raise ConfigError(
            f"inputs[{index}].max",
            [
                Issue(
                    f"inputs[{index}].max",
                    f"a past of at most {past.max[2]} leaves no room for a new token after a "
                    f"prompt of {longest} (input_ids' max): give the past a max above input_ids' max",
                )
            ],
        )
    return room


def _eos(found: Any) -> list[int]:
    if found is None:
        return []
    return [int(t) for t in (found if isinstance(found, (list, tuple)) else [found])]


def _hf(model: Any, prompt: list[int], new: int) -> list[int]:
    import torch

    ids = torch.tensor([prompt])
    with torch.no_grad():  # plain greedy, as served: none of the model's own logits processors
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **greedy(new))
    return [int(t) for t in out[0, len(prompt) :]]


# What a generation_config can ask for beyond plain greedy (transformers' defaults: none).
PROCESSORS = (
    "repetition_penalty", "no_repeat_ngram_size", "bad_words_ids", "min_length", "min_new_tokens",
    "suppress_tokens", "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id",
    "encoder_repetition_penalty", "sequence_bias", "do_sample", "num_beams",
    "exponential_decay_length_penalty", "guidance_scale", "watermarking_config", "stop_strings",
    "token_healing",
)  # fmt: skip


def greedy(new: int) -> dict[str, Any]:
    """generate's arguments for plain greedy: every processor at transformers' default, as
    arguments (a generation_config passed whole takes the model's own values for what it
    leaves at the defaults); the model's eos / pad / bos tokens kept."""
    from transformers import GenerationConfig

    plain = GenerationConfig()
    return {k: getattr(plain, k) for k in PROCESSORS} | {
        "do_sample": False,
        "num_beams": 1,
        "max_new_tokens": new,
    }


def not_applied(found: Any) -> dict[str, Any]:
    """The model's generation_config settings the served (greedy) loop does not apply."""
    from transformers import GenerationConfig

    plain = GenerationConfig()
    return {k: getattr(found, k) for k in PROCESSORS if getattr(found, k, None) != getattr(plain, k, None)}


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
