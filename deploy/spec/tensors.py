"""The model's tensors as a config declares them: each input's dims and min / opt / max
shapes (the single source of ONNX dynamic axes, TensorRT profiles and Triton dims), each
output's name, path and kind, and how detections are padded. Part of the spec, the
domain's model of what is being deployed: no engine, no stage, no library.
"""

from __future__ import annotations

import json
import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

# What each integer dtype holds (numpy's iinfo, written out: the spec imports no numpy).
INTEGER_SPANS = {
    "int64": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int8": (-128, 127),
    "uint8": (0, 255),
}
DType = Literal[
    "float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"
]
# A bf16 input was called, exported and checked as float32 while Triton's config said BF16:
# every smoke request failed (the python backend cannot hand BF16 to numpy).
UNCARRIED_BF16 = (
    "bfloat16 inputs cannot be carried: numpy has no bfloat16, so golden's inputs, ONNX Runtime's "
    "Python API and Triton's python backend would hold float32 while the served config says BF16; "
    "declare float32 and cast inside the model (`x.to(torch.bfloat16)`): the cast is exported with it; "
    "a decoder's cache inputs are the model's own dtype, so build it in float32 (`model.float()`) and "
    "leave bf16 to a precision (stages.openvino's bf16, stages.inductor_bf16)"
)
Label = Literal["min", "opt", "max"]
LABELS: tuple[Label, ...] = ("min", "opt", "max")
# Dots as in Optimum's cache names (`past_key_values.0.key`): ONNX, TensorRT and Triton take them.
TensorName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")]
DimName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ValueKind(str, Enum):
    """What an input's values mean, so golden data means something: a mask of ones with
    padding, lengths within a sequence, indices below the size they index, offsets into a
    flat input. `random` draws from value_range (or a standard normal for floats)."""

    RANDOM = "random"
    MASK = "mask"  # ones, then zeros (padding) along the last axis; at least one 1 per row
    # zeros, then ones: True marks padding (PyTorch's key_padding_mask); at least one 0 per row
    PADDING = "padding"
    LENGTHS = "lengths"  # in 1..size of `of` (sorted longest first, the longest = the size)
    INDICES = "indices"  # in 0..size of `of` - 1 (or value_range)
    OFFSETS = "offsets"  # ascending from 0, below the size of `of` (EmbeddingBag's offsets)

    @property
    def bounded(self) -> bool:
        """Whether the values are bounded by a dim's size (`of`)."""
        return self in (ValueKind.LENGTHS, ValueKind.INDICES, ValueKind.OFFSETS)


INTEGER_KINDS = (ValueKind.LENGTHS, ValueKind.INDICES, ValueKind.OFFSETS)


class InputSpec(Frozen):
    """One model input: dims name the dynamic axes; min/opt/max are full shapes (all
    empty for a 0-d scalar)."""

    name: TensorName = Field(description="Input name in ONNX, TensorRT and Triton: `[A-Za-z_][A-Za-z0-9_]*`.")
    dtype: DType = Field(
        "float32",
        description="Element type (bfloat16 is refused: numpy cannot carry it; cast inside the model).",
    )
    dims: tuple[int | DimName, ...] = Field(
        description="One entry per axis: an int is a static size, a name a dynamic dim (axis 0: the batch dim); "
        "`[]` for a 0-d scalar (a model without a batch dim only: Triton batches every input).",
    )
    min: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        description="Smallest full shape (TensorRT profile min); static dims repeat their size. 0 only for a dynamic "
        "dim after the first (a decoder's past length: no cache yet)."
    )
    opt: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        description="The shape to optimise for (TensorRT profile opt; golden inputs and stats use it)."
    )
    max: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        description="Largest full shape (TensorRT profile max; its batch is Triton's default max_batch_size)."
    )
    # Range of the golden random values; integer inputs (token ids) need one.
    value_range: tuple[float, float] | None = Field(
        None,
        description="Range of the random golden values: integers are drawn from low..high *inclusive* "
        "(`[0, 1]` gives 0s and 1s), floats uniformly from [low, high). Required for integer inputs (e.g. token ids).",
    )

    values: ValueKind = Field(
        ValueKind.RANDOM,
        description="What the values mean, for golden data that means something: random (value_range), mask (ones "
        "then zero padding along the last axis), padding (its complement: zeros, then True where a row is padded, "
        "as PyTorch's key_padding_mask), lengths (1..the size of dim `of`, longest first), indices "
        "(0..the size of `of` - 1), offsets (ascending from 0, below the size of `of`: EmbeddingBag's).",
    )
    of: DimName | None = Field(
        None,
        description="The named dim whose size bounds lengths, indices and offsets (e.g. `sequence`, `nodes`).",
    )

    @field_validator("dtype")
    @classmethod
    def _carried(cls, dtype: str) -> str:
        if dtype == "bfloat16":
            raise ValueError(UNCARRIED_BF16)
        return dtype

    @model_validator(mode="after")
    def _check_shapes(self) -> InputSpec:
        problems = [p for label in LABELS for p in self._label_problems(label)]
        problems += self._order_problems() + self._empty_problems()
        problems += self._range_problems() + self._values_problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def integer(self) -> bool:
        return self.dtype.startswith(("int", "uint"))

    def _values_problems(self) -> list[str]:
        kind = self.values
        if kind in INTEGER_KINDS and not self.integer:
            return [f"values: {kind.value} needs an integer dtype (got {self.dtype})"]
        if kind in (ValueKind.LENGTHS, ValueKind.OFFSETS) and self.of is None:
            return [f"values: {kind.value} needs `of`: the named dim whose size bounds them"]
        if kind is ValueKind.INDICES and self.of is None and self.value_range is None:
            return ["values: indices needs `of` (the dim they index) or a value_range"]
        if kind in (ValueKind.MASK, ValueKind.PADDING) and not self.dims:
            return [f"values: {kind.value} needs at least one axis (the padded one is the last)"]
        if self.of is not None and not kind.bounded:
            return [f"`of` applies to lengths, indices and offsets, not to values: {kind.value}"]
        return []

    def _range_problems(self) -> list[str]:
        if self.value_range is None:
            needed = self.integer and self.values is ValueKind.RANDOM
            return (
                ["value_range is required for integer inputs (or values: mask / lengths / indices)"]
                if needed
                else []
            )
        low, high = self.value_range
        if not math.isfinite(high - low):  # NaN, an infinity, or a span no float holds
            return [f"value_range [{low:g}, {high:g}] is not a finite span of values to draw from"]
        if low >= high:
            # Equal bounds make every golden value the same: parity on constants proves nothing.
            return [
                f"value_range needs low < high (got [{low:g}, {high:g}]): equal bounds give a constant input"
            ]
        if self.dtype in INTEGER_SPANS and not (
            INTEGER_SPANS[self.dtype][0] <= low and high <= INTEGER_SPANS[self.dtype][1]
        ):
            first, last = INTEGER_SPANS[self.dtype]
            # Drawn values would wrap around (300 in uint8 is 44): the edges would not be edges.
            return [f"value_range [{low:g}, {high:g}] goes beyond {self.dtype}'s {first}..{last}"]
        return []

    def _label_problems(self, label: Label) -> list[str]:
        shape = getattr(self, label)
        if len(shape) != len(self.dims):
            return [f"{label} has {len(shape)} dims, dims has {len(self.dims)}"]
        return [
            f"{label}[{axis}] is {got}, but dim {axis} is static {want}"
            for axis, (want, got) in enumerate(zip(self.dims, shape))
            if isinstance(want, int) and want != got
        ]

    def _empty_problems(self) -> list[str]:
        """An empty axis is a cache with no past yet: never the first axis (the batch), never static."""
        return [
            f"min[{axis}] is 0: only a named dim after the first may be empty (a decoder's past length)"
            for axis, (dim, size) in enumerate(zip(self.dims, self.min))
            if size == 0 and (axis == 0 or not isinstance(dim, str))
        ]

    def _order_problems(self) -> list[str]:
        if not len(self.min) == len(self.opt) == len(self.max) == len(self.dims):
            return []
        return [
            f"dim {axis} ('{dim}'): need min <= opt <= max, got {lo} / {mid} / {hi}"
            for axis, (dim, lo, mid, hi) in enumerate(zip(self.dims, self.min, self.opt, self.max))
            if not lo <= mid <= hi
        ]

    def shape(self, label: Label) -> tuple[int, ...]:
        return tuple(getattr(self, label))

    def dynamic_axes(self) -> dict[int, str]:
        return {axis: dim for axis, dim in enumerate(self.dims) if isinstance(dim, str)}


class OutputKind(str, Enum):
    """What an output holds, which decides the metrics that make sense for it."""

    LOGITS = "logits"  # class scores: top-1 / top-k agreement apply
    EMBEDDING = "embedding"  # a vector compared by direction (cosine)
    OTHER = "other"


class OutputSpec(Frozen):
    name: TensorName = Field(
        description="Output name in ONNX, TensorRT and Triton: `[A-Za-z_][A-Za-z0-9_]*`."
    )
    # Any printable text: a dict's keys may hold dots, slashes or spaces ('head.logits', 'aux/score').
    path: Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f]+$")] | None = Field(
        None,
        description="Where this output is in what the model returns: a dict key or `ModelOutput` field "
        "(`last_hidden_state`), a position (`0`), or a dotted path into nested results (`hidden_states.3`); "
        "a key holding dots itself (`head.logits`) is matched whole. "
        "Default: the output's name for a dict result, else its position among the returned tensors.",
    )
    kind: OutputKind = Field(
        OutputKind.OTHER,
        description="logits (class scores, shaped [batch, classes]: top-1 / top-k agreement gates apply), "
        "embedding or other (cosine and absolute / relative error only).",
    )


class CacheConvention(str, Enum):
    """How a decoder takes and returns its key/value cache."""

    # forward(input_ids=, past_key_values=<DynamicCache>, position_ids=, use_cache=True):
    # a transformers causal LM; its result's .logits and .past_key_values (a Cache).
    TRANSFORMERS = "transformers"
    # forward(input_ids, past) -> (logits, ((key, value), ...)); past is None before the first token.
    TUPLES = "tuples"


class Decoder(Frozen):
    """A causal decoder served one step at a time with its key/value cache: the exported graph
    takes `input_ids` [batch, sequence] and `past_key_values.N.key` / `.value` [batch, heads,
    past_sequence, head_dim] (past_sequence may be 0: the prefill) and returns `logits`
    [batch, sequence, vocab] and `present.N.key` / `.value` (past + sequence long), Optimum's
    names. Positions follow from the past's length: one sequence per row, no padding."""

    layers: int = Field(
        ge=1, description="Decoder layers: one past key and value input, and one present pair, each."
    )
    max_new_tokens: int = Field(
        64,
        ge=1,
        description="The most tokens one generate request may ask for (and what it gets by default).",
    )
    cache: CacheConvention = Field(
        CacheConvention.TRANSFORMERS,
        description="transformers (a causal LM taking and returning a Cache) or tuples (forward(input_ids, past) "
        "returning (logits, ((key, value), ...)), past None at first).",
    )
    tokenizer: Path | None = Field(
        None,
        description="A Hugging Face tokenizer.json (relative to the config file): the generate models then also take "
        "`text` and answer `output_text` beside the token ids (the `tokenizers` library inside the server).",
    )

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        # spec.config.resolve_path's rule, here because spec.config imports this module.
        base = (info.context or {}).get("base_dir")
        path = value if value is None or value.is_absolute() or base is None else Path(base) / value
        if path is not None and not path.is_file():
            raise ValueError(f"file not found: {path}")
        return path if path is None else tokenizer_json(path)

    def past_names(self) -> list[str]:
        return [f"past_key_values.{i}.{part}" for i in range(self.layers) for part in ("key", "value")]

    def present_names(self) -> list[str]:
        return [f"present.{i}.{part}" for i in range(self.layers) for part in ("key", "value")]


def tokenizer_json(path: Path) -> Path:
    """`path` when it reads as a Hugging Face tokenizer.json (a JSON object with a `model`
    section: what the `tokenizers` library loads), else ValueError saying what it is not;
    found at validate time, not when the server's stub first loads it."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise ValueError(f"{path}: not a tokenizer.json ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ValueError(f"{path}: not a Hugging Face tokenizer.json (no 'model' section)")
    return path


class InputsBy(str, Enum):
    """How the declared inputs are passed to the model's forward."""

    AUTO = "auto"  # by keyword where every input name is a parameter of forward, else by position
    POSITION = "position"
    KEYWORD = "keyword"  # e.g. Hugging Face `input_ids=`, or a `forward(**kwargs)`


class Detections(Frozen):
    """A model that answers one dict per image with a varying number of rows (torchvision's
    detection models: boxes [n, 4], scores [n], labels [n]): each tensor is padded (or cut)
    to `max_detections` rows and stacked over the batch, beside a per-image count, the layout
    of TensorRT's EfficientNMS plugin and of Triton clients."""

    max_detections: int = Field(
        ge=1,
        description="Rows per image in each padded output: the first max_detections of the model's (it orders them "
        "by score), zeros after them.",
    )
    count: TensorName = Field(
        "num_detections",
        description="The output holding each image's number of valid rows (int64 [batch]); declare it under outputs.",
    )
