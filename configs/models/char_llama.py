"""A Llama-style character decoder (transformers' LlamaForCausalLM: grouped-query
attention, RoPE) small enough to train on CPU in seconds on the Zen of Python, the text
that ships with every Python (`import this`). Used by the decoder tests and
configs/char_llama.yaml; `weights` is a state_dict trained by `train` (None: random
weights, for mechanics only)."""

from __future__ import annotations

import codecs
import contextlib
import io
from pathlib import Path


def zen() -> str:
    """The Zen of Python as `import this` prints it (the module holds it rot13-encoded)."""
    with contextlib.redirect_stdout(io.StringIO()):
        import this
    return codecs.decode(this.s, "rot13")


def alphabet() -> str:
    return "".join(sorted(set(zen())))


def encode(text: str) -> list[int]:
    return [alphabet().index(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(alphabet()[i] for i in ids)


def save_tokenizer(path: Path) -> None:
    """A Hugging Face tokenizer.json of this vocabulary (one token per character, the
    `tokenizers` library), for generate models that take and answer text. The one in
    configs/data/zen_tokenizer.json was written by it."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(alphabet())}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=alphabet()[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.save(str(path))


def char_llama(weights: str | None = None, layers: int = 2):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(alphabet()),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention: 2 query heads per key/value head
        max_position_embeddings=512,
        eos_token_id=alphabet().index("."),  # a sentence ends generation
        bos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    if weights is not None:
        model.load_state_dict(torch.load(weights, weights_only=True))
    return model.eval()


def train(path: Path, steps: int = 400, window: int = 64) -> float:
    """Trains on windows of the Zen (seeded), saves the state_dict to `path`, returns the
    next-character accuracy on the whole text (teacher forced)."""
    import torch

    torch.manual_seed(0)
    text = torch.tensor(encode(zen()))
    model = char_llama().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        starts = torch.randint(0, len(text) - window - 1, (32,))
        batch = torch.stack([text[s : s + window + 1] for s in starts])
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    torch.save(model.state_dict(), path)
    with torch.no_grad():
        chunks = text[: len(text) // window * window].view(-1, window)
        logits = model(input_ids=chunks).logits[:, :-1]
        return float((logits.argmax(-1) == chunks[:, 1:]).float().mean())


# `python configs/models/char_llama.py zen.pt`: the weights the decoder how-to deploys
if __name__ == "__main__":
    import sys

    where = Path(sys.argv[1] if len(sys.argv) > 1 else "zen.pt")
    print(f"{where}: next-character accuracy {train(where):.3f}")
