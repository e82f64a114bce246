"""The Triton settings production configs carry: warm-up from the golden inputs, the
response cache, version policy, the dynamic batcher's queue policy, rate-limiter
resources, instances on chosen GPUs, and ONNX Runtime's execution accelerators.

Each is a field of Triton's ModelConfig, set on the protobuf (so the stage's round trip
checks it against Triton's schema). What the embedded CPU server here cannot exercise
(GPUs, TensorRT / CUDA / OpenVINO accelerators) is schema-checked only; docs say so.
"""

from __future__ import annotations

from enum import StrEnum
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from deploy.domain.vocabulary import Precision
from deploy.spec.tensors import Frozen, Label

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from deploy.gates.references import Golden

WARMUP_DIR = "warmup"  # Triton reads input_data_file from <model>/warmup/


class Warmup(Frozen):
    """model_warmup: requests Triton runs before it reports the model READY, so the first
    client does not pay for lazy initialisation (allocations, kernel selection)."""

    cases: tuple[Label, ...] = Field(
        ("opt",), min_length=1, description="Golden inputs used, one warm-up sample each (min, opt, max)."
    )
    count: int = Field(1, ge=1, description="Executions of each sample.")


class TimeoutAction(StrEnum):
    REJECT = "reject"
    DELAY = "delay"


class VersionKind(StrEnum):
    LATEST = "latest"
    ALL = "all"
    SPECIFIC = "specific"


class Accelerator(StrEnum):
    """An ONNX Runtime execution provider Triton's onnxruntime backend can put first."""

    TENSORRT = "tensorrt"
    CUDA = "cuda"
    OPENVINO = "openvino"


class QueuePolicy(Frozen):
    """dynamic_batching.default_queue_policy: what happens to requests that wait too long."""

    timeout_action: TimeoutAction = Field(
        TimeoutAction.REJECT,
        description="A request past its timeout: rejected, or delayed behind the others.",
    )
    timeout_us: int = Field(0, ge=0, description="Queue timeout per request, µs; 0: none.")
    allow_timeout_override: bool = Field(False, description="Clients may set their own (shorter) timeout.")
    max_queue_size: int = Field(
        0, ge=0, description="Requests queued at most, beyond which Triton rejects; 0: no limit."
    )


class Resource(Frozen):
    name: str = Field(min_length=1, description="Resource name, e.g. R1.")
    count: int = Field(ge=1, description="Units one execution of an instance needs.")
    shared: bool = Field(False, description="Global across devices (Triton's `global`), not per device.")


class RateLimiter(Frozen):
    """instance_group.rate_limiter: executions start only when their resources are free
    (effective when the server runs with --rate-limit=execution_count)."""

    resources: tuple[Resource, ...] = Field((), description="What an execution of an instance takes.")
    priority: int = Field(0, ge=0, description="Weight among instances competing for resources; 0: default.")


class VersionPolicy(Frozen):
    """Which versions of the model Triton serves."""

    kind: VersionKind = Field(VersionKind.LATEST, description="latest N, all, or the listed ones.")
    latest: int = Field(1, ge=1, description="kind latest: how many of the newest versions.")
    versions: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        (), description="kind specific: the version numbers."
    )

    @model_validator(mode="after")
    def _versions_for_specific(self) -> VersionPolicy:
        if (self.kind == VersionKind.SPECIFIC) != bool(self.versions):
            raise ValueError("versions is needed with kind specific, and only there")
        return self


class OnnxAccelerator(Frozen):
    """optimization.execution_accelerators for the onnx format (ONNX Runtime backend):
    tensorrt / cuda on GPU instances, openvino on CPU ones."""

    kind: Accelerator = Field(description="The execution provider.")
    precision: Literal["fp32", "fp16"] = Field("fp32", description="kind tensorrt: precision_mode.")
    workspace_mib: int | None = Field(
        None, ge=1, description="kind tensorrt: max_workspace_size_bytes, in MiB."
    )

    @model_validator(mode="after")
    def _tensorrt_only(self) -> OnnxAccelerator:
        if self.kind != Accelerator.TENSORRT and (
            self.precision != Precision.FP32 or self.workspace_mib is not None
        ):
            raise ValueError("precision and workspace_mib apply to kind tensorrt only")
        return self


def warmup(
    proto: ModelConfig, pb: ModuleType, spec: Warmup, golden: Golden, inputs: list[tuple[str, str]]
) -> dict[str, bytes]:
    """Adds one batch-1 warm-up sample per golden case; returns the files to write under
    warmup/ (raw row-major bytes of the first item of each golden input)."""
    files = {}
    for label in spec.cases:
        sample = proto.model_warmup.add(name=f"golden_{label}", batch_size=1, count=spec.count)
        for served_name, config_name in inputs:
            array = golden[label].inputs[config_name]
            item = array[0] if proto.max_batch_size else array
            filename = f"{label}_{config_name}"
            files[filename] = item.tobytes()
            entry = sample.inputs[served_name]
            entry.data_type = _data_type(pb, str(array.dtype))
            entry.dims.extend(int(n) for n in item.shape)
            entry.input_data_file = filename
    return files


def _data_type(pb: ModuleType, dtype: str) -> int:
    from deploy.serving.layout import TRITON_TYPES

    return int(pb.DataType.Value(TRITON_TYPES[dtype]))


def queue_policy(proto: ModelConfig, pb: ModuleType, policy: QueuePolicy) -> None:
    queue = proto.dynamic_batching.default_queue_policy
    action = policy.timeout_action.upper()  # Triton spells them REJECT / DELAY
    queue.timeout_action = pb.ModelQueuePolicy.TimeoutAction.Value(action)
    queue.default_timeout_microseconds = policy.timeout_us
    queue.allow_timeout_override = policy.allow_timeout_override
    queue.max_queue_size = policy.max_queue_size


def rate_limiter(group: Any, limiter: RateLimiter) -> None:
    for resource in limiter.resources:
        group.rate_limiter.resources.add(
            name=resource.name, count=resource.count, **{"global": resource.shared}
        )
    group.rate_limiter.priority = limiter.priority


def version_policy(proto: ModelConfig, policy: VersionPolicy) -> None:
    if policy.kind == VersionKind.LATEST:
        proto.version_policy.latest.num_versions = policy.latest
    elif policy.kind == VersionKind.ALL:
        proto.version_policy.all.SetInParent()
    else:
        proto.version_policy.specific.versions.extend(policy.versions)


def accelerators(proto: ModelConfig, found: tuple[OnnxAccelerator, ...]) -> None:
    accelerate = proto.optimization.execution_accelerators
    for accelerator in found:
        where = (
            accelerate.cpu_execution_accelerator
            if accelerator.kind == Accelerator.OPENVINO
            else accelerate.gpu_execution_accelerator
        )
        entry = where.add(name=accelerator.kind)
        if accelerator.kind == Accelerator.TENSORRT:
            entry.parameters["precision_mode"] = accelerator.precision.upper()
            if accelerator.workspace_mib is not None:
                entry.parameters["max_workspace_size_bytes"] = str(accelerator.workspace_mib << 20)


def openvino_backend(proto: ModelConfig, precision: str) -> None:
    """Triton's openvino backend: the latency hint (one stream per instance: the instances
    and the dynamic batcher give the concurrency); bf16 asked for with HINT_BF16. It has no
    f32 switch: on a CPU with bf16 it computes the fp32 model in bf16 too, the CPU plugin's
    default (bench's openvino_bf16 row and the openvino stage's bf16 gate measure that)."""
    proto.parameters["PERFORMANCE_HINT"].string_value = "LATENCY"
    if precision == Precision.BF16:
        proto.parameters["HINT_BF16"].string_value = "YES"
