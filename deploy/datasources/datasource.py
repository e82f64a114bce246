"""Where calibration and held-out inputs come from: random (smoke only), a directory of
images with declared preprocessing, or .npy / .npz arrays. The model is pydantic only
(imported at discovery); loading imports numpy (and PIL for images) when it runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from deploy.domain.vocabulary import DataKind, Layout
from deploy.pipeline.graph.hashing import digest_file
from deploy.spec.config import resolve_path

if TYPE_CHECKING:
    import numpy as np

    from deploy.gates.accuracy_report import Evidence
    from deploy.spec.config import DeployConfig
    from deploy.spec.tensors import InputSpec

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".ppm")


class Preprocess(BaseModel):
    """Image -> tensor: resize the shorter side, center-crop, scale, normalise, lay out."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    resize: int = Field(256, ge=1, description="Resize the shorter side to this many pixels.")
    crop: int = Field(224, ge=1, description="Then center-crop to crop x crop.")
    scale: float = Field(1 / 255, description="Multiply pixel values (0-255) by this (default 1/255).")
    mean: tuple[float, float, float] = Field(
        (0.485, 0.456, 0.406), description="Per-channel (RGB) mean subtracted after scaling."
    )
    std: tuple[float, float, float] = Field(
        (0.229, 0.224, 0.225), description="Per-channel (RGB) std divided by after that."
    )
    layout: Layout = Field(Layout.NCHW, description="Axis order of the resulting tensor.")


class DataSource(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: DataKind = Field(
        DataKind.RANDOM,
        description="random: random inputs (smoke tests only); images: a directory of images; arrays: .npy / .npz; "
        "text: a .txt file, one sample per line, tokenized with `tokenizer`.",
    )
    path: Path | None = Field(
        None,
        description="images: a directory; arrays: a .npy file (one input) or .npz (arrays by input name); "
        "text: a .txt file.",
    )
    tokenizer: Path | None = Field(
        None,
        description="kind text: a Hugging Face tokenizer.json (the `tokenizers` library); it makes input_ids, "
        "attention_mask and token_type_ids, whichever the model's inputs are named.",
    )
    max_length: int = Field(
        128, ge=1, description="kind text: every sample padded or truncated to this many tokens."
    )
    count: int = Field(32, ge=1, description="Number of samples.")
    offset: int = Field(
        0, ge=0, description="Skip this many samples first (e.g. to hold out the calibration ones)."
    )
    seed: int = Field(1234, description="kind random: seed of the random samples.")
    preprocess: Preprocess = Field(Preprocess(), description="kind images: image -> tensor preprocessing.")

    @field_validator("path", "tokenizer")
    @classmethod
    def _exists(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        path = resolve_path(value, info)
        if path is not None and not path.exists():
            raise ValueError(f"not found: {path}")
        return path

    @model_validator(mode="after")
    def _path_given(self) -> DataSource:
        if self.kind != DataKind.RANDOM and self.path is None:
            raise ValueError(f"a '{self.kind}' source needs a path")
        if (self.kind == DataKind.TEXT) != (self.tokenizer is not None):
            raise ValueError("a 'text' source needs a tokenizer, and only a 'text' source takes one")
        problem = _path_problem(self.kind, self.path)
        if problem:
            raise ValueError(problem)
        return self


def _path_problem(kind: str, path: Path | None) -> str | None:
    """A path of the wrong sort for its kind, found before any stage runs (not as an
    OS or numpy error half way through the pipeline)."""
    if path is None or not path.exists():
        return None  # missing: reported by the path's own validator
    if kind == DataKind.IMAGES and not path.is_dir():
        return f"an 'images' source needs a directory of images; {path} is a file"
    if kind == DataKind.ARRAYS and (not path.is_file() or path.suffix not in (".npy", ".npz")):
        return f"an 'arrays' source needs a .npy or .npz file; got {path}"
    if kind == DataKind.TEXT and not path.is_file():
        return f"a 'text' source needs a text file, one sample per line; {path} is a directory"
    return None


def load(source: DataSource, config: DeployConfig) -> list[dict[str, np.ndarray]]:
    """`count` samples (after skipping `offset`), each a batch-1 feed {input name: array}."""
    from deploy.pipeline.errors import StageFailed

    if source.kind == DataKind.RANDOM:
        return _random(source, config)
    if source.path is None or not source.path.exists():
        raise StageFailed(f"data source path not found: {source.path}")
    arrays = _read(source, config, slice(source.offset, source.offset + source.count))
    wrong = [
        p
        for spec in config.inputs
        if (p := _sample_shape_problem(spec, arrays[spec.name], config.batch_dim is not None))
    ]
    if wrong:
        raise StageFailed(f"{source.path}: {'; '.join(wrong)}")
    found = min(len(v) for v in arrays.values())
    if found < source.count:
        raise StageFailed(
            f"{source.path}: {found} samples after offset {source.offset}, {source.count} wanted"
        )
    return [{k: v[i : i + 1] for k, v in arrays.items()} for i in range(source.count)]


def _read(source: DataSource, config: DeployConfig, window: slice) -> dict[str, np.ndarray]:
    """The window's arrays by input name; a file numpy or PIL cannot read is named, with
    their reason, rather than surfacing as a bare ValueError / OSError."""
    import zipfile

    from deploy.pipeline.errors import StageFailed, first_line

    try:
        if source.kind == DataKind.IMAGES:
            return _images(source, config, window)
        if source.kind == DataKind.TEXT:
            from deploy.datasources.text import tokenized

            return tokenized(source, config, window)
        return {k: v[window] for k, v in _arrays(source, config).items()}
    except (
        OSError,
        ValueError,
        EOFError,
        zipfile.BadZipFile,
    ) as exc:  # PIL's UnidentifiedImageError is an OSError
        raise StageFailed(
            f"{source.path}: cannot read this '{source.kind}' source: {first_line(exc)}"
        ) from exc


def _sample_shape_problem(spec: InputSpec, array: np.ndarray, batched: bool) -> str | None:
    """A sample is one row (shape [1, ...]); a wrong layout (NHWC for NCHW, a missing
    channel axis) is named here, not left to ONNX Runtime's rank error about the model."""
    sample = (1, *array.shape[1:])
    first = 1 if batched else 0  # a sample's batch of 1 is the caller's choice, not the data's
    fits = len(sample) == len(spec.dims) and all(
        spec.min[a] <= sample[a] <= spec.max[a] for a in range(first, len(sample))
    )
    if fits:
        return None
    return (
        f"input '{spec.name}': samples of shape {list(sample)} do not fit the shape spec "
        f"(dims {list(spec.dims)}, min {list(spec.min)}, max {list(spec.max)})"
    )


def _random(source: DataSource, config: DeployConfig) -> list[dict[str, np.ndarray]]:
    import numpy as np

    from deploy.gates.references import make_inputs

    rng = np.random.default_rng(source.seed + source.offset)
    return [{k: v[:1] for k, v in make_inputs(config, "opt", rng).items()} for _ in range(source.count)]


def _arrays(source: DataSource, config: DeployConfig) -> dict[str, np.ndarray]:
    import numpy as np

    from deploy.pipeline.errors import StageFailed

    names = [spec.name for spec in config.inputs]
    assert source.path is not None
    if source.path.suffix == ".npy":
        if len(names) != 1:
            raise StageFailed(f"{source.path}: a .npy file feeds one input; the model has {names}: use .npz")
        return {names[0]: np.load(source.path).astype(config.inputs[0].dtype)}
    with np.load(source.path) as data:
        missing = [n for n in names if n not in data.files]
        if missing:
            raise StageFailed(f"{source.path}: no array for input(s) {missing} (has {data.files})")
        return {spec.name: data[spec.name].astype(spec.dtype) for spec in config.inputs}


def _images(source: DataSource, config: DeployConfig, window: slice) -> dict[str, np.ndarray]:
    import numpy as np
    from PIL import Image

    from deploy.pipeline.errors import StageFailed

    assert source.path is not None
    if len(config.inputs) != 1:
        raise StageFailed("an image source feeds a single-input model")
    files = sorted(p for p in source.path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[window]
    if not files:
        raise StageFailed(
            f"{source.path}: no images ({', '.join(IMAGE_SUFFIXES)}) after offset {source.offset}"
        )
    pixels = [_preprocess(Image.open(f).convert("RGB"), source.preprocess) for f in files]
    return {config.inputs[0].name: np.stack(pixels).astype(config.inputs[0].dtype)}


def _preprocess(image: object, pre: Preprocess) -> np.ndarray:
    import numpy as np
    from PIL import Image

    assert isinstance(image, Image.Image)
    ratio = pre.resize / min(image.size)
    image = image.resize((round(image.width * ratio), round(image.height * ratio)), Image.Resampling.BILINEAR)
    left, top = (image.width - pre.crop) // 2, (image.height - pre.crop) // 2
    pixels = (
        np.asarray(image.crop((left, top, left + pre.crop, top + pre.crop)), dtype=np.float32) * pre.scale
    )
    pixels = (pixels - np.array(pre.mean, np.float32)) / np.array(pre.std, np.float32)
    return pixels.transpose(2, 0, 1) if pre.layout == Layout.NCHW else pixels


def fingerprint(source: DataSource | None) -> str | None:
    """What the data is, for the cache key, without loading it: a file's sha256, a
    directory's listing with sizes and mtimes (images are many; rehashing them all on
    every run would cost more than the run)."""
    import hashlib
    import os

    if source is None or source.path is None or not source.path.exists():
        return None
    if source.tokenizer is not None and source.tokenizer.is_file():  # the text and its tokenizer
        return hashlib.sha256(
            "".join(digest_file(p) for p in (source.path, source.tokenizer)).encode()
        ).hexdigest()
    if source.path.is_file():
        return digest_file(source.path)
    listing = sorted(
        (e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(source.path) if e.is_file()
    )
    return hashlib.sha256(repr(listing).encode()).hexdigest()


def evidence(source: DataSource, key: str) -> Evidence:
    """What an accuracy measured on `source` rests on; `key`: where real data is given."""
    from deploy.gates.accuracy_report import Evidence

    if source.kind == DataKind.RANDOM:
        return Evidence(
            True,
            f"random inputs (seed {source.seed + source.offset})",
            f"{key} (kind: images, arrays or text)",
        )
    return Evidence(False, f"{source.kind} from {source.path}", key)
