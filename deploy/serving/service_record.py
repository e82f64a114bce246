"""The service record: what `triton_config` writes into each service model's
config.pbtxt (the `deploy_role` and `deploy_service` parameters) and every later reader
reads back (the ensemble's wiring, smoke's references, `deploy infer`, bench's feeds), so
they see what was written, not what a config says now. One writer, one reader, typed and
versioned; and the one place the service models' names are made.

The pre / post python models inside the server read the same JSON by its keys
(serving/pre_model.py, post_model.py are self-contained by design: the server has none of
this package); the fields here are named as they read them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from deploy.serving.service import ROLE_PARAMETER, SERVICE_PARAMETER, Role
from deploy.spec.tensors import Frozen

# The records' layout; a repository written with another is refused, naming the stage to rerun.
RECORD_VERSION = 1
ENSEMBLE_SUFFIX = "_ensemble"


class ImageRecord(Frozen):
    version: int = RECORD_VERSION
    kind: Literal["image"] = "image"
    feed: str  # the model input the pixels go to
    color: Literal["rgb", "grayscale"]
    resize: int
    crop: int
    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]
    layout: Literal["NCHW", "NHWC"]
    max_bytes: int
    max_pixels: int


class TextRecord(Frozen):
    version: int = RECORD_VERSION
    kind: Literal["text"] = "text"
    tokenizer: str  # the file's name in the pre model's version directory
    max_length: int
    min_length: int
    feeds: dict[str, str]  # model input -> tokenizer field
    max_bytes: int


class ClassifyRecord(Frozen):
    version: int = RECORD_VERSION
    kind: Literal["classify"] = "classify"
    reads: str  # the model output scored
    softmax: bool
    top_k: int
    labels: str | None  # the file's name in the post model's version directory


class EmbeddingRecord(Frozen):
    version: int = RECORD_VERSION
    kind: Literal["embedding"] = "embedding"
    reads: str
    normalize: bool


class EnsembleRecord(Frozen):
    version: int = RECORD_VERSION
    kind: Literal["ensemble"] = "ensemble"
    model: str  # the served model it wraps
    pre: str | None
    post: str | None


PreRecord = ImageRecord | TextRecord
PostRecord = ClassifyRecord | EmbeddingRecord
ServiceRecord = Annotated[PreRecord | PostRecord | EnsembleRecord, Field(discriminator="kind")]
_READER: TypeAdapter[Any] = TypeAdapter(ServiceRecord)


class StaleRecord(ValueError):
    """A record of another layout: the repository was written by another deploy."""


def service_name(base: str, role: Role) -> str:
    """The repository name of a service model: `<pipeline>_pre` / `<pipeline>_post`, and
    `<served model>_ensemble`."""
    suffix = {Role.PRE: "_pre", Role.POST: "_post", Role.ENSEMBLE: ENSEMBLE_SUFFIX}
    return f"{base}{suffix[role]}"


def write_record(proto: Any, role: Role, record: ServiceRecord | None) -> None:
    """Tags a model config (protobuf ModelConfig) with its role and, for a service part,
    its record."""
    proto.parameters[ROLE_PARAMETER].string_value = role.value
    if record is not None:
        proto.parameters[SERVICE_PARAMETER].string_value = record.model_dump_json()


def read_record(parameters: Mapping[str, Any]) -> ServiceRecord | None:
    """The record in a model config's parameters (protobuf map or its JSON form); None for
    a model that is no service part."""
    entry = parameters.get(SERVICE_PARAMETER) if SERVICE_PARAMETER in parameters else None
    if entry is None:
        return None
    text = entry.string_value if hasattr(entry, "string_value") else entry["string_value"]
    data = json.loads(text)
    if data.get("version") != RECORD_VERSION:
        raise StaleRecord(
            f"a service record of version {data.get('version')} (this deploy reads {RECORD_VERSION}): "
            "rerun triton_config (deploy run CONFIG --force triton_config)"
        )
    record: ServiceRecord = _READER.validate_python(data)
    return record
