"""triton_config: a Triton model repository with one model per serving format.

Naming: model `<name>_<format>` (e.g. resnet50_onnx, resnet50_torchscript), each with
`config.pbtxt` and `<version>/<default model file>`. The `python` format serves the ONNX
file with ONNX Runtime under Triton's python backend (`<version>/model.py` + `model.onnx`):
the CPU serving format that runs on any server with the python backend. Every config is built as Triton's
`ModelConfig` protobuf, printed, parsed back and compared before it is written.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from deploy.domain.artifacts import BATCHING, GOLDEN, MANIFEST, REPOSITORY
from deploy.domain.issues import Issue
from deploy.domain.naming import model_name
from deploy.domain.vocabulary import ModelSuffix, Precision, ServingFormat
from deploy.gates.batch_independence import BatchIndependence
from deploy.pipeline.contract import (
    Artifact,
    ArtifactKind,
    Phase,
    Publish,
    Section,
    StageContext,
    StageSpec,
)
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.facts import Provides
from deploy.runtimes.bf16_gate import bf16_gated
from deploy.runtimes.catalog import CATALOG, OPENVINO_FORMATS, serving
from deploy.runtimes.engine_manifest import EngineManifest
from deploy.serving.layout import (
    FORMAT_PARAMETER,
    LAYOUTS,
    PYTHON_MODEL,
    SCALARS_PARAMETER,
    io_name,
    wire_dims,
)
from deploy.serving.publishing import PUBLISHING, Publishing, PublishPolicy, when_all
from deploy.serving.service import Role
from deploy.serving.service_record import service_name
from deploy.spec.config import DeployConfig
from deploy.stages.triton_config import batching, ensemble, production
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


def check(params: TritonParams, config: DeployConfig) -> list[Issue]:
    where, issues = "stages.triton_config", []
    batch = config.batch_range()
    size = max_batch(params, config)
    if batch is None and size > 0:
        issues.append(
            Issue(f"{where}.max_batch_size", "must be 0: the model has no batch dim (batch_dim: null)")
        )
    if batch is not None and size > batch[2]:
        issues.append(
            Issue(f"{where}.max_batch_size", f"{size} exceeds the shape spec's max batch {batch[2]}")
        )
    if params.dynamic_batching is not None and size == 0 and "dynamic_batching" in params.model_fields_set:
        issues.append(Issue(f"{where}.dynamic_batching", "needs max_batch_size > 0"))
    merging = dynamic_batching(params, config)
    too_big = [b for b in (merging.preferred_batch_sizes if merging else ()) if b > size]
    if too_big:
        issues.append(
            Issue(
                f"{where}.dynamic_batching.preferred_batch_sizes", f"{too_big} exceed max_batch_size {size}"
            )
        )
    if len(set(params.formats)) != len(params.formats):
        issues.append(Issue(f"{where}.formats", "lists a format twice"))
    issues += _scalar_issues(params, config, size)
    issues += _unserved(params)
    if "bf16" in params.precisions and _openvino_formats(params) and not bf16_gated(config):
        issues.append(
            Issue(
                f"{where}.precisions",
                "bf16 is served only as checked: in the OpenVINO formats it needs the openvino stage with its "
                "bf16 gate (stages.openvino.bf16: true)",
            )
        )
    if params.publish is PublishPolicy.SELECTED and "select" not in config.stages:
        issues.append(Issue(f"{where}.publish", "'selected' needs a select stage in this config"))
    if params.publish is PublishPolicy.RELEASED and "release" not in config.stages:
        issues.append(Issue(f"{where}.publish", "'released' needs a release stage in this config"))
    return issues + _production_issues(params) + ensemble.check(params.preprocess, params.postprocess, config)


def _scalar_issues(params: TritonParams, config: DeployConfig, size: int) -> list[Issue]:
    """Triton has no 0-d tensors: without a batch dim a scalar travels as [1], which only
    the python backend's model.py turns back into the scalar the model takes."""
    scalars = [s.name for s in config.inputs if not s.dims] if size == 0 else []
    other = [f for f in params.formats if LAYOUTS[f].python_model is None]
    if not scalars or not other:
        return []
    return [
        Issue(
            "stages.triton_config.formats",
            f"{[str(f) for f in other]} cannot take the 0-d input(s) {scalars}: Triton has no 0-d tensors in a model "
            "without a batch dim, and only the python formats (python, python_openvino, python_inductor) reshape "
            "the [1] a client sends; serve those, or give the model a batch dim (dims: [batch])",
        )
    ]


def _production_issues(params: TritonParams) -> list[Issue]:
    where, issues = "stages.triton_config", []
    if params.instance_group.gpus and params.instance_group.kind != InstanceKind.GPU:
        issues.append(Issue(f"{where}.instance_group.gpus", "needs instance_group.kind gpu"))
    if params.onnx_accelerators and "onnx" not in params.formats:
        issues.append(
            Issue(f"{where}.onnx_accelerators", "apply to the onnx format, which formats does not list")
        )
    limiter = params.instance_group.rate_limiter
    names = [r.name for r in (limiter.resources if limiter else ())]
    if len(set(names)) != len(names):
        issues.append(Issue(f"{where}.instance_group.rate_limiter.resources", "names a resource twice"))
    return issues


@dataclass(frozen=True)
class ServedModel:
    """One Triton model: a format of the model at one precision."""

    model: str
    fmt: ServingFormat
    precision: Precision
    artifact: str


def served(params: TritonParams, name: str) -> list[ServedModel]:
    """resnet50_onnx, resnet50_python, resnet50_python_int8, ... (fp32 keeps the short name).
    Reduced precisions apply to the ONNX-based formats (onnx, python); INT8 and bf16
    (the FP32 IR computed in bf16) to the OpenVINO ones (openvino, python_openvino)."""
    out = []
    for fmt in params.formats:
        for precision in params.precisions:
            runtime = serving(fmt, precision)  # the file it serves: runtimes/catalog.py's table
            if runtime is not None:
                out.append(
                    ServedModel(model_name(name, fmt, precision), fmt, Precision(precision), runtime.artifact)
                )
    return out


def inputs_for(params: TritonParams) -> tuple[str, ...]:
    extra = ("manifest",) if "plan" in params.formats else ()
    return ("golden", "batching", *dict.fromkeys(s.artifact for s in served(params, "x")), *extra)


def check_engine_batch(manifest: EngineManifest, params: TritonParams, size: int) -> None:
    """Triton refuses a plan whose profiles can't take max_batch_size ("configuration
    specified max-batch N but TensorRT engine only supports max-batch M")."""
    engine_max = manifest.max_batch(list(params.plan.profiles))
    if size > engine_max:
        raise StageFailed(f"max_batch_size {size} exceeds the engine's profiles' max batch {engine_max}")


def run(ctx: StageContext, params: TritonParams) -> None:
    from deploy.gates import references

    golden = references.load(ctx.input(GOLDEN))
    root = ctx.output(REPOSITORY)
    models = [m for m in served(params, ctx.config.name) if m.artifact in ctx.inputs]
    models = _where_computable(ctx, models)
    _refuse_merging(ctx, params, golden, models)
    for missing in [m for m in served(params, ctx.config.name) if m.artifact not in ctx.inputs]:
        ctx.log.warning(
            "%s not written: no %s artifact (its stage was skipped or is not configured)",
            missing.model,
            missing.artifact,
        )
        ctx.record(f"not_written.{missing.model}", f"no {missing.artifact} (stage skipped or not configured)")
    if any(m.fmt == ServingFormat.PLAN for m in models) and "manifest" in ctx.inputs:
        manifest = EngineManifest.read(ctx.input(MANIFEST))
        check_engine_batch(manifest, params, max_batch(params, ctx.config))
    protos = []
    for entry in models:
        source = ctx.input(entry.artifact)
        if entry.artifact.startswith("onnx"):
            _check_onnx_names(ctx, source)
        proto = model_config(entry.model, entry.fmt, params, ctx.config, golden, entry.precision)
        warm = _warmup(proto, entry.fmt, params, ctx.config, golden)
        protos.append(proto)
        text = _written(ctx, proto)
        _write_model(root / entry.model, params.version, text, source, LAYOUTS[entry.fmt].model_file)
        for filename, data in warm.items():
            (root / entry.model / production.WARMUP_DIR).mkdir(exist_ok=True)
            (root / entry.model / production.WARMUP_DIR / filename).write_bytes(data)
        if LAYOUTS[entry.fmt].python_model is not None:
            shutil.copyfile(PYTHON_MODEL, root / entry.model / str(params.version) / "model.py")
    services = _write_service(ctx, params, golden, protos)
    ctx.record("models", [m.model for m in models])
    if services:
        ctx.record("services", services)
    ctx.headline(", ".join([m.model for m in models] + services))


def _bf16_host(params: TritonParams) -> dict[str, object]:
    """Whether bf16 models are written depends on the CPU (`_where_computable`): its model
    is in the key when they are asked for."""
    from deploy.runtimes.devices import host_identity

    return {"host_cpu": host_identity()["host_cpu"]} if "bf16" in params.precisions else {}


def _unserved(params: TritonParams) -> list[Issue]:
    """A precision no listed format serves would be left out without a word."""
    return [
        Issue(
            "stages.triton_config.precisions",
            f"{precision}: none of formats {[str(f) for f in params.formats]} serves it (formats that do: "
            f"{', '.join(dict.fromkeys(f for d in CATALOG.values() if d.precision == precision for f in d.served_as))})",
        )
        for precision in params.precisions
        if not any(serving(fmt, precision) for fmt in params.formats)
    ]


def _openvino_formats(params: TritonParams) -> bool:
    return any(f in OPENVINO_FORMATS for f in params.formats)


def _where_computable(ctx: StageContext, models: list[ServedModel]) -> list[ServedModel]:
    """OpenVINO's bf16 only where this CPU computes it: elsewhere the openvino stage skipped
    its bf16 gate, and the served model would refuse to load (python_model.py). A bf16
    AOTInductor package is served wherever its stage built it (emulated where asked)."""
    ov_bf16 = [m for m in models if m.precision == Precision.BF16 and m.fmt in OPENVINO_FORMATS]
    if not ov_bf16:
        return models
    from deploy.runtimes.openvinort import Compute, lacks

    reason = lacks(Compute.BF16)
    if reason is None:
        return models
    for model in ov_bf16:
        ctx.log.warning("%s not written: %s", model.model, reason)
        ctx.record(f"not_written.{model.model}", reason)
    return [m for m in models if m not in ov_bf16]


def _refuse_merging(
    ctx: StageContext, params: TritonParams, golden: Golden, models: list[ServedModel]
) -> None:
    """Every precision served with a batch dim is measured for batch independence
    (stages/triton_config/batching.py; into the summary); dynamic batching only where each
    answers per sample."""
    if max_batch(params, ctx.config) == 0:
        return
    # The ONNX files, run in ONNX Runtime; NNCF's INT8 IR quantizes with static scales
    # (calibrated, never per batch), so its answers do not depend on the batch either.
    files: dict[str, Path] = {
        m.precision: ctx.input(m.artifact)
        for m in models
        if m.precision != Precision.FP32 and m.artifact.startswith("onnx")
    }
    fp32 = BatchIndependence.read(ctx.input(BATCHING))
    found = batching.records(fp32, files, golden, ctx.config.output_names())
    ctx.record("batching", {p: r.text() for p, r in found.items()})
    if dynamic_batching(params, ctx.config) is not None:
        batching.refuse(found)


def _warmup(
    proto: ModelConfig, fmt: str, params: TritonParams, config: DeployConfig, golden: Golden
) -> dict[str, bytes]:
    from tritonclient.grpc import model_config_pb2 as pb

    if params.warmup is None:
        return {}
    names = [(io_name(fmt, s.name, i), s.name) for i, s in enumerate(config.inputs)]
    return production.warmup(proto, pb, params.warmup, golden, names)


def _written(ctx: StageContext, proto: ModelConfig) -> str:
    text = render(proto)
    ctx.log.info("wrote %s:\n%s", proto.name, text)
    return text


def _write_service(ctx: StageContext, params: TritonParams, golden: Golden, protos: list[Any]) -> list[str]:
    """`<name>_pre`, `<name>_post` and an ensemble per served model; their names."""
    from tritonclient.grpc import model_config_pb2 as pb

    pre, post, config = params.preprocess, params.postprocess, ctx.config
    if (pre is None and post is None) or not protos:
        return []
    size, count, root = max_batch(params, config), params.instance_group.count, ctx.output(REPOSITORY)
    parts = {}
    if pre is not None:
        parts[Role.PRE] = ensemble.pre_proto(
            pb, service_name(config.name, Role.PRE), pre, config, size, count
        )
    if post is not None:
        reads = ensemble.post_output(post, config)
        source = (str(golden["opt"].outputs[reads].dtype), _output_dims(golden, reads, size))
        ensemble.count_labels(post, math.prod(source[1]))
        parts[Role.POST] = ensemble.post_proto(
            pb, service_name(config.name, Role.POST), post, config, source, size, count
        )
    ensemble.write_parts(root, params.version, parts, pre, post)
    ensembles = [
        ensemble.ensemble_proto(pb, p, config, parts.get(Role.PRE), parts.get(Role.POST)) for p in protos
    ]
    for proto in [*parts.values(), *ensembles]:
        (root / proto.name / str(params.version)).mkdir(parents=True, exist_ok=True)
        (root / proto.name / "config.pbtxt").write_text(_written(ctx, proto))
    for proto in ensembles:  # Triton needs the version dir; a file keeps it in trees and copies
        (root / proto.name / str(params.version) / "ENSEMBLE").write_text(ensemble.ENSEMBLE_NOTE)
    return [p.name for p in [*parts.values(), *ensembles]]


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
    scalars = []
    for i, spec in enumerate(config.inputs):
        dims = [-1 if isinstance(d, str) else d for d in spec.dims][1 if size else 0 :]
        entry = proto.input.add(name=io_name(fmt, spec.name, i), data_type=ensemble.data_type(pb, spec.dtype))
        scalars += _dims(entry, dims, size > 0, spec.name)
    for i, out in enumerate(config.outputs):
        dtype = str(golden["opt"].outputs[out.name].dtype)
        entry = proto.output.add(name=io_name(fmt, out.name, i), data_type=ensemble.data_type(pb, dtype))
        scalars += _dims(entry, _output_dims(golden, out.name, size), size > 0, out.name)
    if scalars:  # 0-d in a model without batching: the python backend's model.py reshapes them
        proto.parameters[SCALARS_PARAMETER].string_value = ",".join(scalars)
    merging = dynamic_batching(params, config)
    if merging is not None:
        proto.dynamic_batching.max_queue_delay_microseconds = merging.max_queue_delay_us
        proto.dynamic_batching.preferred_batch_size.extend(merging.preferred_batch_sizes)
    # The python formats run ONNX Runtime's CPU provider or OpenVINO's CPU plugin, as does
    # the openvino backend: their instances are CPU instances; a TensorRT plan runs on GPUs only.
    cpu_only = (ServingFormat.PYTHON, ServingFormat.PYTHON_OPENVINO, ServingFormat.OPENVINO)
    kind = InstanceKind.CPU if fmt in cpu_only else params.instance_group.kind
    kind = InstanceKind.GPU if fmt == ServingFormat.PLAN else kind
    group = proto.instance_group.add(
        kind=pb.ModelInstanceGroup.Kind.Value(f"KIND_{kind.upper()}"), count=params.instance_group.count
    )
    if fmt == ServingFormat.PLAN:
        group.profile.extend(str(p) for p in params.plan.profiles)
        proto.cc_model_filenames.update(params.plan.cc_model_filenames)
    _production(proto, pb, fmt, params, group, precision)
    # Read back by the smoke stage to pick the tolerance for this precision, and by
    # repository.models to tell the python backend's formats apart.
    proto.parameters["deploy_precision"].string_value = precision
    proto.parameters[FORMAT_PARAMETER].string_value = fmt
    return proto


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


def _output_dims(golden: Golden, name: str, max_batch_size: int) -> list[int]:
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


def _check_onnx_names(ctx: StageContext, source: Path) -> None:
    import onnx

    graph = onnx.load(str(source), load_external_data=False).graph
    want = {s.name for s in ctx.config.inputs} | {s.name for s in ctx.config.outputs}
    have = {i.name for i in graph.input} | {o.name for o in graph.output}
    if want - have:
        raise StageFailed(f"the ONNX model lacks tensors the config names: {sorted(want - have)}")


def _write_model(model_dir: Path, version: int, text: str, source: Path, filename: str) -> None:
    (model_dir / str(version)).mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(text)
    dest = model_dir / str(version) / filename
    if source.suffix == ModelSuffix.IR:  # an OpenVINO IR: its weights beside it, written first
        shutil.copyfile(source.with_suffix(".bin"), dest.with_suffix(".bin"))
        shutil.copyfile(source, dest)
    elif source.suffix == ModelSuffix.PT2:  # an AOTInductor package: its record (device) beside it
        from deploy.runtimes.inductorrt import RECORD_FILE

        shutil.copyfile(source.with_name(RECORD_FILE), dest.with_name(RECORD_FILE))
        shutil.copyfile(source, dest)
    elif source.suffix == ModelSuffix.ONNX:
        from deploy.modelio import onnx_files

        onnx_files.copy(source, dest)  # with the weights file beside it, if any
    else:
        shutil.copyfile(source, dest)


# The AOTInductor packages: served where their stage is configured and ran.
INDUCTOR_ARTIFACTS = ("inductor", "inductor_fp16", "inductor_bf16")

SPEC = StageSpec(
    phase=Phase.PACKAGE,
    name="triton_config",
    version=9,  # 9: python_inductor at fp16 and bf16 (the inductor_fp16 / inductor_bf16 packages); 8: python_inductor (an AOTInductor package in the python backend; model.py loads it); 7: OpenVINO formats, deploy_format in every config; 6: dynamic batching refused for batch-dependent outputs of any served precision
    params=TritonParams,
    inputs=(
        "golden",
        "batching",
        "onnx",
        "onnx_int8",
        "onnx_fp16",
        "openvino",
        "openvino_int8",
        "torchscript",
        "inductor",
        "inductor_fp16",
        "inductor_bf16",
        "engine",
        "manifest",
    ),
    outputs=(Artifact("repository", ArtifactKind.TREE, publish=Publish.REPOSITORY),),
    run=run,
    uses=frozenset({Section.NAME, Section.SHAPES}),
    env=("tritonclient", "protobuf", "onnx", "onnxruntime", "openvino", "numpy"),
    check=check,
    identity=lambda p: {**ensemble.files(p.preprocess, p.postprocess), **_bf16_host(p)},
    select_inputs=inputs_for,
    optional_inputs=frozenset({"engine", "manifest", *INDUCTOR_ARTIFACTS}),
    # No trace stage (the torch.export path): the torchscript format is not written, and says so.
    if_configured=frozenset({"torchscript", *INDUCTOR_ARTIFACTS}),
    publishes=when_all,
    provides=(Provides(PUBLISHING, lambda p: Publishing(p.publish, p.publish_to)),),
    description="Triton model repository: config.pbtxt (validated as ModelConfig) + model files",
    timeout_s=600,
)
