"""The model's config.pbtxt as Triton's ModelConfig protobuf: its batch size and dynamic
batcher, its inputs and outputs in wire dims, the production settings; printed with
`render`, parsed back and compared before it is written (stage.py)."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from deploy.domain.vocabulary import Precision, ServingFormat
from deploy.pipeline.errors import StageFailed
from deploy.serving.layout import (
    FORMAT_PARAMETER,
    LAYOUTS,
    SCALARS_PARAMETER,
    io_name,
    wire_dims,
)
from deploy.spec.config import DeployConfig
from deploy.stages.triton_config import ensemble, production
from deploy.stages.triton_config.params import DynamicBatching, InstanceKind, TritonParams

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from deploy.gates.references import Golden


def max_batch(params: TritonParams, config: DeployConfig) -> int:
    batch = config.batch_range()
    if params.max_batch_size is not None:
        return params.max_batch_size
    return 0 if batch is None else batch[2]


def dynamic_batching(params: TritonParams, config: DeployConfig) -> DynamicBatching | None:
    """The dynamic batcher as written: its default applies to a model served with a batch
    dim (max_batch_size > 0); asked for explicitly without one, `check` refuses it."""
    if max_batch(params, config) == 0 and "dynamic_batching" not in params.model_fields_set:
        return None
    return params.dynamic_batching


def model_config(
    name: str,
    fmt: ServingFormat,
    params: TritonParams,
    config: DeployConfig,
    golden: Golden,
    precision: str = Precision.FP32,
) -> Any:
    from tritonclient.grpc import model_config_pb2 as pb

    size = max_batch(params, config)
    proto = pb.ModelConfig(name=name, max_batch_size=size)
    layout = LAYOUTS[fmt]
    if layout.by_backend:
        proto.backend = layout.backend
    else:
        proto.platform = layout.platform
    _tensors(proto, pb, fmt, config, golden, size)
    merging = dynamic_batching(params, config)
    if merging is not None:
        proto.dynamic_batching.max_queue_delay_microseconds = merging.max_queue_delay_us
        proto.dynamic_batching.preferred_batch_size.extend(merging.preferred_batch_sizes)
    group = _instances(proto, pb, fmt, params)
    if fmt == ServingFormat.PLAN:
        group.profile.extend(str(p) for p in params.plan.profiles)
        proto.cc_model_filenames.update(params.plan.cc_model_filenames)
    _production(proto, pb, fmt, params, group, precision)
    # Read back by the smoke stage to pick the tolerance for this precision, and by
    # repository.models to tell the python backend's formats apart.
    proto.parameters["deploy_precision"].string_value = precision
    proto.parameters[FORMAT_PARAMETER].string_value = fmt
    return proto


def _tensors(
    proto: Any, pb: ModuleType, fmt: ServingFormat, config: DeployConfig, golden: Golden, size: int
) -> None:
    """The inputs and outputs in wire dims; 0-d ones named for the python model to reshape."""
    scalars = []
    for i, spec in enumerate(config.inputs):
        dims = [-1 if isinstance(d, str) else d for d in spec.dims][1 if size else 0 :]
        entry = proto.input.add(name=io_name(fmt, spec.name, i), data_type=ensemble.data_type(pb, spec.dtype))
        scalars += _dims(entry, dims, size > 0, spec.name)
    for i, out in enumerate(config.outputs):
        dtype = str(golden["opt"].outputs[out.name].dtype)
        entry = proto.output.add(name=io_name(fmt, out.name, i), data_type=ensemble.data_type(pb, dtype))
        scalars += _dims(entry, output_dims(golden, out.name, size), size > 0, out.name)
    if scalars:  # 0-d in a model without batching: the python backend's model.py reshapes them
        proto.parameters[SCALARS_PARAMETER].string_value = ",".join(scalars)


def _instances(proto: Any, pb: ModuleType, fmt: ServingFormat, params: TritonParams) -> Any:
    """The python formats run ONNX Runtime's CPU provider or OpenVINO's CPU plugin, as does
    the openvino backend: their instances are CPU instances; a TensorRT plan runs on GPUs only."""
    cpu_only = (ServingFormat.PYTHON, ServingFormat.PYTHON_OPENVINO, ServingFormat.OPENVINO)
    kind = InstanceKind.CPU if fmt in cpu_only else params.instance_group.kind
    kind = InstanceKind.GPU if fmt == ServingFormat.PLAN else kind
    return proto.instance_group.add(
        kind=pb.ModelInstanceGroup.Kind.Value(f"KIND_{kind.upper()}"), count=params.instance_group.count
    )


def _dims(entry: Any, dims: list[int], batched: bool, name: str) -> list[str]:
    """Sets a tensor's dims as Triton takes them (serving/layout.wire_dims); the name
    where the model's tensor is 0-d and travels as [1] unreshaped."""
    wire, reshaped = wire_dims(dims, batched)
    entry.dims.extend(wire)
    if reshaped:
        entry.reshape.SetInParent()  # an empty shape: the model sees [batch]
    return [name] if wire != dims and not batched else []


def _production(
    proto: ModelConfig, pb: ModuleType, fmt: str, params: TritonParams, group: Any, precision: str
) -> None:
    batching = params.dynamic_batching if proto.HasField("dynamic_batching") else None
    instances = params.instance_group
    if batching is not None and batching.queue_policy is not None:
        production.queue_policy(proto, pb, batching.queue_policy)
    if group.kind == pb.ModelInstanceGroup.Kind.Value("KIND_GPU"):
        group.gpus.extend(instances.gpus)
    if instances.rate_limiter is not None:
        production.rate_limiter(group, instances.rate_limiter)
    if params.version_policy is not None:
        production.version_policy(proto, params.version_policy)
    proto.response_cache.enable = params.response_cache
    if fmt == ServingFormat.ONNX:
        production.accelerators(proto, params.onnx_accelerators)
    if fmt == ServingFormat.OPENVINO:
        production.openvino_backend(proto, precision)


def output_dims(golden: Golden, name: str, max_batch_size: int) -> list[int]:
    from deploy.gates.references import varying_axes

    shape = golden["opt"].outputs[name].shape
    varying = varying_axes(golden, name)
    dims = [-1 if axis in varying else int(n) for axis, n in enumerate(shape)]
    return dims[1:] if max_batch_size else dims


def render(proto: ModelConfig) -> str:
    """Protobuf text format, proven to parse back into an equal ModelConfig."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    text = text_format.MessageToString(proto)
    parsed = text_format.Parse(text, pb.ModelConfig())
    if parsed != proto:
        raise StageFailed(f"config.pbtxt for {proto.name} does not round-trip through ModelConfig")
    return str(text)
