"""triton_config's params: one frozen model per setting group, validated as the YAML is
read (pydantic only: imported at discovery)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from deploy.domain.vocabulary import ServingFormat
from deploy.serving.publishing import PublishPolicy
from deploy.serving.service import Postprocess, Preprocess
from deploy.spec.tensors import Frozen
from deploy.stages.triton_config import production


class DynamicBatching(Frozen):
    max_queue_delay_us: int = Field(
        100, ge=0, description="How long Triton may hold a request to form a larger batch, µs."
    )
    preferred_batch_sizes: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        (), description="Batch sizes Triton prefers to form; each at most max_batch_size."
    )
    queue_policy: production.QueuePolicy | None = Field(
        None, description="default_queue_policy: request timeouts and the queue's size limit; null: Triton's."
    )


class InstanceKind(StrEnum):
    """Triton's KIND_* of an instance group."""

    AUTO = "auto"
    CPU = "cpu"
    GPU = "gpu"


class InstanceGroup(Frozen):
    kind: InstanceKind = Field(
        InstanceKind.CPU,
        description="Where model instances run (Triton KIND_*); the python format always uses cpu, plan gpu.",
    )
    count: int = Field(1, ge=1, description="Model instances per device.")
    gpus: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        (), description="kind gpu: the GPUs (by index) that get `count` instances each; empty: every GPU."
    )
    rate_limiter: production.RateLimiter | None = Field(
        None,
        description="Resources an execution needs (the server's --rate-limit=execution_count enforces them).",
    )


class PlanOptions(Frozen):
    """TensorRT-only settings for the `plan` format."""

    # instance_group.profile: the optimization profiles (by index) instances may use.
    profiles: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        (),
        description="instance_group.profile: the optimization profiles (by index) instances may use; empty: all.",
    )
    # cc_model_filenames: compute capability -> plan file, for a repository that ships
    # engines for several GPUs (e.g. {"8.0": "model_a100.plan"}).
    cc_model_filenames: dict[str, str] = Field(
        default_factory=dict,
        description='Compute capability -> plan file name, for engines for several GPUs (e.g. {"8.0": "model_a100.plan"}).',
    )


class TritonParams(Frozen):
    # python is in the defaults so that they work on the default server (the
    # nvidia-pytriton wheel's, which has only the python backend).
    formats: tuple[ServingFormat, ...] = Field(
        (ServingFormat.ONNX, ServingFormat.TORCHSCRIPT, ServingFormat.PYTHON),
        min_length=1,
        description="One Triton model `<name>_<format>` per format; python serves the ONNX file with ONNX Runtime "
        "(Triton's python backend); openvino: the OpenVINO IR on Triton's openvino backend (a server with that "
        "backend); python_openvino: the IR with OpenVINO in the python backend (any server); python_inductor: the "
        "inductor stage's AOTInductor package run by torch in the python backend (any server); plan needs the "
        "build stage's engine.",
    )
    # Default: the shape spec's max batch (0 when the model has no batch dim).
    max_batch_size: int | None = Field(
        None,
        ge=0,
        description="null: the shape spec's max batch (0 without a batch dim); must not exceed it.",
    )
    version: int = Field(1, ge=1, description="Model version directory in the repository.")
    dynamic_batching: DynamicBatching | None = Field(
        DynamicBatching(), description="Triton dynamic batching; null: off."
    )
    instance_group: InstanceGroup = Field(
        InstanceGroup(), description="Model instances (Triton instance_group)."
    )
    # fp32: the exported model; int8 / fp16: the quantize / fp16 stages' ONNX, served in
    # the ONNX-based formats as <name>_<format>_<precision>; in the OpenVINO formats int8
    # is the openvino_int8 stage's IR and bf16 the FP32 IR computed in bf16; in python_inductor
    # fp16 and bf16 are the inductor_fp16 / inductor_bf16 stages' packages.
    precisions: tuple[Literal["fp32", "int8", "fp16", "bf16"], ...] = Field(
        ("fp32",),
        min_length=1,
        description="fp32: the exported model; int8 / fp16: the quantize / fp16 stages' ONNX, served in the "
        "ONNX-based formats as `<name>_<format>_<precision>`; in the OpenVINO formats int8 is the openvino_int8 "
        "stage's IR and bf16 the FP32 IR computed in bf16 (the openvino stage's bf16 gate; CPUs with bf16 only); "
        "in python_inductor fp16 and bf16 are the inductor_fp16 / inductor_bf16 stages' packages.",
    )
    plan: PlanOptions = Field(PlanOptions(), description="Settings of the plan (TensorRT) format only.")
    publish: PublishPolicy = Field(
        PublishPolicy.ALL,
        description="What reaches the published repository: all, every model written here (as triton_search "
        "tuned it); selected, only the models serving what the select stage chose (needs select); released, "
        "each changed model as a new version once the release stage compared it with what is deployed (needs release).",
    )
    warmup: production.Warmup | None = Field(
        None,
        description="model_warmup from the golden inputs: Triton runs them before the model is READY (smoke checks "
        "the server log); null: none.",
    )
    response_cache: bool = Field(
        False,
        description="Triton's response cache for every model (identical requests answered from the cache; the "
        "server needs --cache-config, which servers deploy starts have).",
    )
    version_policy: production.VersionPolicy | None = Field(
        None,
        description="Which versions Triton serves (latest N, all, specific); null: Triton's default, the latest.",
    )
    onnx_accelerators: tuple[production.OnnxAccelerator, ...] = Field(
        (),
        description="The onnx format's ONNX Runtime execution accelerators, by priority: tensorrt / cuda on GPU "
        "instances, openvino on CPU ones.",
    )
    preprocess: Preprocess | None = Field(
        None,
        description="Publish a service: `<name>_pre` turns image bytes (kind image) or sentences (kind text) into "
        "the model's inputs, and each served model gets a `<model>_ensemble` a client sends them to.",
    )
    postprocess: Postprocess | None = Field(
        None,
        description="`<name>_post` in each ensemble: top-k classes with labels (kind classify) or an L2-normalised "
        "vector (kind embedding); null: the ensemble answers the model's outputs.",
    )
    publish_to: str | None = Field(
        None,
        pattern=r"^(s3|gs|gcs|az|abfs|file)://.+",
        description="Also publish the repository to object storage (s3://bucket/models, gs://, az://, file://), "
        "model by model with config.pbtxt last; credentials and $AWS_ENDPOINT_URL from the environment.",
    )
