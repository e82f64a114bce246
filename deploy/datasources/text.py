"""Text as model inputs (a calibration / held-out `kind: text` source): one sample per
line, tokenized with a Hugging Face tokenizer.json through the `tokenizers` library,
padded or truncated to `max_length`. Imports numpy and tokenizers when called."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deploy.pipeline.errors import StageFailed

if TYPE_CHECKING:
    import numpy as np

    from deploy.spec.config import DeployConfig

# What a tokenizer's encoding gives, by the input names transformer exports use.
FIELDS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}


def tokenized(source: Any, config: DeployConfig, window: slice) -> dict[str, np.ndarray]:
    import numpy as np

    unknown = [s.name for s in config.inputs if s.name not in FIELDS]
    if unknown:
        raise StageFailed(
            f"{source.path}: a 'text' source makes {sorted(FIELDS)}; the model also takes {unknown}"
        )
    lines = [line.strip() for line in source.path.read_text(encoding="utf-8").splitlines() if line.strip()]
    encodings = _tokenizer(source).encode_batch(lines[window])
    return {
        s.name: np.array([getattr(e, FIELDS[s.name]) for e in encodings], dtype=s.dtype)
        for s in config.inputs
    }


def _tokenizer(source: Any) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        from deploy.pipeline.errors import MissingDependency

        raise MissingDependency(f"the tokenizers library ({exc})", "pip install tokenizers") from exc
    try:
        tokenizer = Tokenizer.from_file(str(source.tokenizer))
    except Exception as exc:  # the Rust library raises its own Exception subclass
        raise StageFailed(
            f"{source.tokenizer}: not a tokenizer.json the tokenizers library reads: {exc}"
        ) from exc
    tokenizer.enable_truncation(source.max_length)
    tokenizer.enable_padding(length=source.max_length)
    return tokenizer
