"""The generate loop over one decoding step with its key/value cache (config
`model.decoder`): prefill the prompt with an empty past, then one token at a time, greedy
or sampled (temperature, top-k, top-p, a seed), until max_new_tokens or a stop token.

Plain numpy and no deploy import: `triton_config` copies this file verbatim beside a
generate model's model.py, so the served loop is this code, and deploy's in-process
generation (bench, golden, smoke's reference) runs the same lines with another step.
"""

from dataclasses import dataclass, field

import numpy as np

GREEDY = 0.0  # a temperature of 0: the most likely token, always


@dataclass(frozen=True)
class Sampling:
    """What one request asks for. A seed makes sampling reproducible run to run; without
    one, each request draws its own."""

    max_new_tokens: int = 32
    temperature: float = GREEDY
    top_k: int = 0  # 0: no limit
    top_p: float = 1.0  # 1: no limit
    seed: int | None = None
    stop: tuple[int, ...] = ()

    def __post_init__(self):
        """A request's settings, refused by name where they mean nothing."""
        problems = []
        if not (self.temperature >= 0 and self.temperature < float("inf")):
            problems.append(f"temperature is {self.temperature}: give 0 (greedy) or more")
        if self.top_k < 0:
            problems.append(f"top_k is {self.top_k}: give 0 (no limit) or more")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p is {self.top_p}: give a value in (0, 1]")
        if self.seed is not None and self.seed < 0:
            problems.append(f"seed is {self.seed}: give 0 or more")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True)
class CacheShape:
    """The past a step takes: per layer a key and a value [1, heads, past, head_dim]."""

    layers: int
    heads: int
    head_dim: int
    dtype: str = "float32"
    names: list[str] = field(default_factory=list)  # past_key_values.N.key / .value, in order

    def empty(self) -> dict[str, np.ndarray]:
        shape = (1, self.heads, 0, self.head_dim)
        return {name: np.zeros(shape, self.dtype) for name in self.names}


def generate(step, prompt, cache, sampling, on_token=None):
    """Tokens after `prompt` (a sequence of ids). `step(feeds)` runs the graph: feeds are
    input_ids [1, n] and the past by name; it returns logits first, then the present in
    the past's order. `on_token(token)` hears each token as it is chosen (streaming)."""
    if sampling.max_new_tokens < 1:
        return []
    rng = np.random.default_rng(sampling.seed)
    ids = np.asarray(prompt, dtype=np.int64).reshape(1, -1)
    if ids.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token")
    if ids.min() < 0:  # a graph's Gather would wrap it to the end of the vocabulary
        raise ValueError(f"token id {int(ids.min())} in the prompt: ids are 0 or more")
    past, tokens = cache.empty(), []
    while len(tokens) < sampling.max_new_tokens:
        outputs = step({"input_ids": ids, **past})
        token = choose(np.asarray(outputs[0])[0, -1], sampling, rng)
        tokens.append(token)
        if on_token is not None:
            on_token(token)
        if token in sampling.stop:
            break
        past = dict(zip(cache.names, outputs[1:]))
        ids = np.array([[token]], dtype=np.int64)
    return tokens


def choose(logits, sampling, rng):
    """The next token from one row of logits."""
    if sampling.temperature <= GREEDY:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / sampling.temperature
    order = np.argsort(-scaled, kind="stable")
    if sampling.top_k > 0:
        order = order[: sampling.top_k]
    probs = np.exp(scaled[order] - scaled[order[0]])
    probs /= probs.sum()
    if sampling.top_p < 1.0:  # the smallest head of the ranking whose mass reaches top_p
        keep = int(np.searchsorted(np.cumsum(probs), sampling.top_p) + 1)
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(len(order), p=probs)])
