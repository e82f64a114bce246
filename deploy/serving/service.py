"""A service instead of a tensor endpoint: what the pre- and post-processing of the
published ensemble do, declared in `triton_config` and written into the repository.

`triton_config` writes `<name>_pre` / `<name>_post` (Triton python models,
serving/pre_model.py and serving/post_model.py copied verbatim) and one ensemble per
served model; their settings travel in each config.pbtxt's `deploy_service` parameter as
a typed, versioned record (serving/service_record.py: one writer, one reader), so smoke,
`deploy infer` and any later reader see what was written, not what a config says now. Pydantic only at import: the stage modules import it at discovery.
"""

from __future__ import annotations

import importlib.util
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from deploy.spec.config import resolve_path
from deploy.spec.tensors import Frozen, tokenizer_json

# config.pbtxt parameter keys the repository carries for readers of the repository.
ROLE_PARAMETER = "deploy_role"
SERVICE_PARAMETER = "deploy_service"
# The files the pre / post models read, in their version directory.
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.txt"
# Ensemble input names a client sends, and the pre model's own input (not a name a
# model input could have: one model may not have an input and an output of one name).
IMAGE_INPUT = "image"
TEXT_INPUT = "text"
PRE_INPUT = "encoded"
# What a client may send: an encoded image of 20 MiB decoding to at most 40 megapixels (a
# 8000 x 5000 photo), or a sentence of 100 kB (a tokenizer reads it whole before it
# truncates: 10 MB held 1.7 GB).
MAX_IMAGE_BYTES = 20 << 20
MAX_IMAGE_PIXELS = 40_000_000
MAX_TEXT_BYTES = 100_000


class Role(StrEnum):
    """What a model in the repository is: the network in one format, or part of a service."""

    MODEL = "model"
    PRE = "preprocess"
    POST = "postprocess"
    ENSEMBLE = "ensemble"
    GENERATE = "generate"  # a decoder's generate loop (serving/generate_model.py)


class RequestKind(StrEnum):
    """What a service takes in."""

    IMAGE = "image"
    TEXT = "text"


class AnswerKind(StrEnum):
    """What a service answers."""

    CLASSIFY = "classify"
    EMBEDDING = "embedding"


class Color(StrEnum):
    RGB = "rgb"
    GRAYSCALE = "grayscale"


def _existing(value: Path | None, info: ValidationInfo) -> Path | None:
    path = resolve_path(value, info)
    if path is not None and not path.is_file():
        raise ValueError(f"file not found: {path}")
    return path


class ImagePre(Frozen):
    """Encoded image bytes (JPEG, PNG, ...) -> the model's input tensor, as torchvision's
    Resize -> CenterCrop -> ToTensor -> Normalize compute it on a PIL image."""

    kind: Literal["image"] = Field("image", description="Encoded images in.")
    input: str | None = Field(None, description="The model input fed; null: the model's only input.")
    color: Color = Field(Color.RGB, description="Pixels converted to RGB or grayscale.")
    resize: int = Field(256, ge=1, description="The shorter side is resized to this many pixels (bilinear).")
    crop: int = Field(224, ge=1, description="Then center-cropped to crop x crop (the model's H and W).")
    scale: float = Field(1 / 255, gt=0, description="Pixel values (0-255) are multiplied by this.")
    mean: tuple[float, ...] = Field((0.485, 0.456, 0.406), description="Per-channel mean subtracted.")
    std: tuple[float, ...] = Field((0.229, 0.224, 0.225), description="Per-channel std divided by.")
    layout: Literal["NCHW", "NHWC"] = Field("NCHW", description="Axis order of the model's input.")
    max_bytes: int = Field(
        MAX_IMAGE_BYTES,
        ge=1,
        description="An encoded image above this many bytes is refused (that request gets an error; the server "
        "serves on).",
    )
    max_pixels: int = Field(
        MAX_IMAGE_PIXELS,
        ge=1,
        description="An image whose header declares more pixels (width x height) than this is refused before it is "
        "decoded: a small PNG can declare a 169-megapixel image that takes gigabytes to decode.",
    )

    @property
    def channels(self) -> int:
        return 3 if self.color == Color.RGB else 1


class TokenizerField(StrEnum):
    IDS = "ids"
    ATTENTION_MASK = "attention_mask"
    TYPE_IDS = "type_ids"


# Hugging Face input names and the tokenizer output each takes, when `feeds` is left out.
DEFAULT_FEEDS = {
    "input_ids": TokenizerField.IDS,
    "attention_mask": TokenizerField.ATTENTION_MASK,
    "token_type_ids": TokenizerField.TYPE_IDS,
}


def _resource(value: Path, info: ValidationInfo) -> Path:
    """A file relative to the config, or `package:NAME/path` inside an installed package
    (a tokenizer shipped with the model's weights)."""
    text = str(value)
    if text.startswith("package:"):
        name, _, rest = text.removeprefix("package:").partition("/")
        found = importlib.util.find_spec(name)
        if found is None or not found.submodule_search_locations:
            raise ValueError(f"no installed package '{name}'")
        value = Path(next(iter(found.submodule_search_locations))) / rest
    path = _existing(value, info)
    assert path is not None
    return path


class TextPre(Frozen):
    """Sentences -> token ids, attention mask (and type ids) with a Hugging Face
    `tokenizer.json` (the `tokenizers` library), padded to the longest of a request."""

    kind: Literal["text"] = Field("text", description="Sentences in (UTF-8).")
    tokenizer: Path = Field(
        description="A Hugging Face tokenizer.json, relative to the config file, or `package:NAME/path/tokenizer.json` "
        "inside an installed package."
    )
    max_length: int | None = Field(
        None, ge=1, description="Longer texts are truncated; null: the shape spec's max sequence length."
    )
    feeds: dict[str, TokenizerField] = Field(
        default_factory=dict,
        description="Model input -> tokenizer output (ids, attention_mask, type_ids); empty: by the "
        "Hugging Face names input_ids, attention_mask, token_type_ids.",
    )
    max_bytes: int = Field(
        MAX_TEXT_BYTES,
        ge=1,
        description="A sentence above this many bytes (UTF-8) is refused before it is tokenized (the tokenizer "
        "truncates to max_length only after reading all of it); the server serves on.",
    )

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, value: Path, info: ValidationInfo) -> Path:
        return tokenizer_json(_resource(value, info))


Preprocess = Annotated[ImagePre | TextPre, Field(discriminator="kind")]


class Classify(Frozen):
    """Class scores -> the top-k classes, their probabilities and their labels."""

    kind: Literal["classify"] = Field("classify", description="Top-k classes out.")
    output: str | None = Field(None, description="The model output read; null: the model's only output.")
    softmax: bool = Field(True, description="Apply softmax first (false: the output is probabilities).")
    top_k: int = Field(5, ge=1, description="How many classes each answer lists.")
    labels: Path | None = Field(
        None, description="A text file, one label per class in class order; null: class numbers."
    )

    _labels = field_validator("labels")(_existing)


class Embedding(Frozen):
    """A vector out: L2-normalised (cosine similarity becomes a dot product)."""

    kind: Literal["embedding"] = Field("embedding", description="A vector out.")
    output: str | None = Field(None, description="The model output read; null: the model's only output.")
    normalize: bool = Field(True, description="L2-normalise each vector.")


Postprocess = Annotated[Classify | Embedding, Field(discriminator="kind")]
