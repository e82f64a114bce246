"""The smoke stage's parameters (its YAML section), apart from its run so that its helpers can
import them."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deploy.domain.vocabulary import Protocol, ServingFormat
from deploy.gates.tolerance import Tolerance
from deploy.serving.server_spec import ServerSpec
from deploy.spec.config import resolve_path


class ServiceGate(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

    min_top1_agreement: float = Field(
        1.0, ge=0, le=1, description="Share of samples whose top-1 class is the reference's (classify)."
    )
    min_cosine: float = Field(
        0.999, ge=-1, le=1, description="Cosine of the served top-k scores / embedding vs the reference."
    )


class ServiceParams(BaseModel):
    """The check of each published ensemble (triton_config.preprocess): real inputs over
    every protocol, compared with the eager model inside Python pre/post-processing."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

    samples: Path | None = Field(
        None,
        description="A directory of images or a text file of sentences (one per line); null: scikit-learn's "
        "bundled photos (JPEG and PNG) or a few built-in sentences.",
    )
    gate: ServiceGate = Field(
        ServiceGate(),
        description="Served vs reference: the eager model for FP32 ensembles; ONNX Runtime on the served file for "
        "INT8 / FP16 ones (their accuracy is the quantize / fp16 stages' gate).",
    )

    _samples = field_validator("samples")(resolve_path)


class Source(StrEnum):
    """What the server reads."""

    CACHE = "cache"  # the repository artifact
    # A copy on triton_config.publish_to's object storage (`<publish_to>.candidate`): the
    # server reads s3:// itself; publish_to itself is replaced only once smoke passed.
    PUBLISHED = "published"


class GoldenCases(StrEnum):
    """Which golden cases each protocol sends."""

    # validate configured (its report an input): it compared the very files served with eager at every golden case,
    # so smoke proves the serving path: the batch edges (min, max) over the first protocol,
    # min and opt over each other one. Without validate: all.
    AUTO = "auto"
    ALL = "all"  # every golden case (sampled shapes, value edges) over every protocol
    SHAPE_SPEC = "shape_spec"  # min and max over the first protocol, min and opt over the others


class SmokeParams(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False
    )  # .inf: no gate

    server: ServerSpec = Field(ServerSpec(), description="Which tritonserver to start or reach.")
    protocols: tuple[Protocol, ...] = Field(
        (Protocol.HTTP, Protocol.GRPC), min_length=1, description="Protocols the inference checks use."
    )
    tolerance: Tolerance = Field(
        Tolerance(), description="Served outputs vs the eager reference on the golden inputs."
    )
    golden_cases: GoldenCases = Field(
        GoldenCases.AUTO,
        description="Golden cases sent per protocol. shape_spec: the shape spec's min and max batch over the first "
        "protocol, min and opt over the others (the serving path: dims, batching, each protocol's encoding); all: "
        "every golden case (sampled shapes, value edges) over every protocol; auto: shape_spec where validate is "
        "configured (it compared the files served with eager at every case), else all.",
    )
    clients: int = Field(
        8,
        ge=1,
        description="Concurrent check: clients sending at once, each its own requests (golden's distinct client "
        "requests, batch sizes 1-3), over the protocols in turn; every answer vs that request's own reference.",
    )
    # Two per client by default: client c sends requests c and c + 1 over the protocol of
    # its turn, so each distinct request goes out over both protocols, all at once.
    batching_requests: int = Field(
        16,
        ge=0,
        description="Concurrent check: requests per burst, shared among the clients (bursts repeat, up to 3, until "
        "the server merges requests where dynamic batching is on); 0: off. The default, two per client, sends "
        "each of the 8 distinct requests over both protocols.",
    )
    request_timeout_s: float = Field(120, gt=0, description="Timeout of each request to the server, seconds.")
    source: Source = Field(
        Source.CACHE,
        description="What the server reads: cache, the repository artifact; published, a copy of it on "
        "triton_config.publish_to's object storage, beside it (`<publish_to>.candidate`, removed after), which the "
        "server reads itself as production would. publish_to itself is replaced only once smoke passed.",
    )
    service: ServiceParams = Field(
        ServiceParams(),
        description="Ensembles (triton_config.preprocess): real images / sentences end to end.",
    )
    require: tuple[ServingFormat, ...] = Field(
        (),
        description="Formats that must be smoke-tested: a model of one of them skipped for a backend the "
        "server lacks (or absent from the repository) fails the stage instead of making it partial.",
    )
