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
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.config import DeployConfig
from pipeline.contract import (
    Artifact,
    ArtifactKind,
    Phase,
    Publish,
    Section,
    StageContext,
    StageSpec,
)
from pipeline.errors import Issue, StageFailed
from pipeline.facts import Provides
from runtimes.engine_manifest import EngineManifest
from serving.layout import LAYOUTS, PYTHON_MODEL, ServingFormat, io_name
from serving.publishing import PUBLISHING, Publishing, PublishPolicy, when_all
from serving.service import Postprocess, Preprocess, Role
from stages.triton_config import ensemble

Format = ServingFormat


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class DynamicBatching(Frozen):
    max_queue_delay_us: int = Field(
        100, ge=0, description="How long Triton may hold a request to form a larger batch, µs."
    )
    preferred_batch_sizes: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        (), description="Batch sizes Triton prefers to form; each at most max_batch_size."
    )


class InstanceGroup(Frozen):
    kind: Literal["auto", "cpu", "gpu"] = Field(
        "cpu",
        description="Where model instances run (Triton KIND_*); the python format always uses cpu, plan gpu.",
    )
    count: int = Field(1, ge=1, description="Model instances per device.")


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
    formats: tuple[Format, ...] = Field(
        ("onnx", "torchscript", "python"),
        min_length=1,
        description="One Triton model `<name>_<format>` per format; python serves the ONNX file with ONNX Runtime "
        "(Triton's python backend); plan needs the build stage's engine.",
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
    # the ONNX-based formats as <name>_<format>_<precision>.
    precisions: tuple[Literal["fp32", "int8", "fp16"], ...] = Field(
        ("fp32",),
        min_length=1,
        description="fp32: the exported model; int8 / fp16: the quantize / fp16 stages' ONNX, served in the "
        "ONNX-based formats as `<name>_<format>_<precision>`.",
    )
    plan: PlanOptions = Field(PlanOptions(), description="Settings of the plan (TensorRT) format only.")
    publish: PublishPolicy = Field(
        PublishPolicy.ALL,
        description="What reaches the published repository: all, every model written here (as triton_search "
        "tuned it); selected, only the models serving what the select stage chose (needs select).",
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


def max_batch(params: TritonParams, config: DeployConfig) -> int:
    batch = config.batch_range()
    if params.max_batch_size is not None:
        return params.max_batch_size
    return 0 if batch is None else batch[2]


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
    if params.dynamic_batching is not None and size == 0:
        issues.append(Issue(f"{where}.dynamic_batching", "needs max_batch_size > 0"))
    too_big = [
        b
        for b in (params.dynamic_batching.preferred_batch_sizes if params.dynamic_batching else ())
        if b > size
    ]
    if too_big:
        issues.append(
            Issue(
                f"{where}.dynamic_batching.preferred_batch_sizes", f"{too_big} exceed max_batch_size {size}"
            )
        )
    if len(set(params.formats)) != len(params.formats):
        issues.append(Issue(f"{where}.formats", "lists a format twice"))
    if params.publish is PublishPolicy.SELECTED and "select" not in config.stages:
        issues.append(Issue(f"{where}.publish", "'selected' needs a select stage in this config"))
    return issues + ensemble.check(params.preprocess, params.postprocess, config)


@dataclass(frozen=True)
class Served:
    """One Triton model: a format of the model at one precision."""

    model: str
    fmt: str
    precision: str
    artifact: str


def served(params: TritonParams, name: str) -> list[Served]:
    """resnet50_onnx, resnet50_python, resnet50_python_int8, ... (fp32 keeps the short name).
    Reduced precisions apply to the ONNX-based formats (onnx, python)."""
    out = []
    for fmt in params.formats:
        for precision in params.precisions if LAYOUTS[fmt].artifact == "onnx" else ("fp32",):
            suffix = "" if precision == "fp32" else f"_{precision}"
            artifact = LAYOUTS[fmt].artifact + suffix
            out.append(Served(f"{name}_{fmt}{suffix}", fmt, precision, artifact))
    return out


def inputs_for(params: TritonParams) -> tuple[str, ...]:
    extra = ("manifest",) if "plan" in params.formats else ()
    return ("golden", *dict.fromkeys(s.artifact for s in served(params, "x")), *extra)


def check_engine_batch(manifest: EngineManifest, params: TritonParams, size: int) -> None:
    """Triton refuses a plan whose profiles can't take max_batch_size ("configuration
    specified max-batch N but TensorRT engine only supports max-batch M")."""
    engine_max = manifest.max_batch(list(params.plan.profiles))
    if size > engine_max:
        raise StageFailed(f"max_batch_size {size} exceeds the engine's profiles' max batch {engine_max}")


def run(ctx: StageContext, params: TritonParams) -> None:
    from gates import references

    golden = references.load(ctx.input("golden"))
    root = ctx.output("repository")
    models = [m for m in served(params, ctx.config.name) if m.artifact in ctx.inputs]
    for missing in [m for m in served(params, ctx.config.name) if m.artifact not in ctx.inputs]:
        ctx.log.warning(
            "%s not written: no %s artifact (its stage was skipped or is not configured)",
            missing.model,
            missing.artifact,
        )
        ctx.record(f"not_written.{missing.model}", f"no {missing.artifact} (stage skipped or not configured)")
    if any(m.fmt == "plan" for m in models) and "manifest" in ctx.inputs:
        manifest = EngineManifest.read(ctx.input("manifest"))
        check_engine_batch(manifest, params, max_batch(params, ctx.config))
    protos = []
    for entry in models:
        source = ctx.input(entry.artifact)
        if entry.artifact.startswith("onnx"):
            _check_onnx_names(ctx, source)
        protos.append(model_config(entry.model, entry.fmt, params, ctx.config, golden, entry.precision))
        _write_model(
            root / entry.model,
            params.version,
            _written(ctx, protos[-1]),
            source,
            LAYOUTS[entry.fmt].model_file,
        )
        if entry.fmt == "python":
            shutil.copyfile(PYTHON_MODEL, root / entry.model / str(params.version) / "model.py")
    services = _write_service(ctx, params, golden, protos)
    ctx.record("models", [m.model for m in models])
    if services:
        ctx.record("services", services)
    ctx.headline(", ".join([m.model for m in models] + services))


def _written(ctx: StageContext, proto: Any) -> str:
    text = render(proto)
    ctx.log.info("wrote %s:\n%s", proto.name, text)
    return text


def _write_service(ctx: StageContext, params: TritonParams, golden: Any, protos: list[Any]) -> list[str]:
    """`<name>_pre`, `<name>_post` and an ensemble per served model; their names."""
    from tritonclient.grpc import model_config_pb2 as pb

    pre, post, config = params.preprocess, params.postprocess, ctx.config
    if (pre is None and post is None) or not protos:
        return []
    size, count, root = max_batch(params, config), params.instance_group.count, ctx.output("repository")
    parts = {}
    if pre is not None:
        parts[Role.PRE] = ensemble.pre_proto(pb, f"{config.name}_pre", pre, config, size, count)
    if post is not None:
        reads = ensemble.post_output(post, config)
        source = (str(golden["opt"].outputs[reads].dtype), _output_dims(golden, reads, size))
        ensemble.count_labels(post, math.prod(source[1]))
        parts[Role.POST] = ensemble.post_proto(pb, f"{config.name}_post", post, config, source, size, count)
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
    name: str, fmt: str, params: TritonParams, config: DeployConfig, golden: Any, precision: str = "fp32"
) -> Any:
    from tritonclient.grpc import model_config_pb2 as pb

    size = max_batch(params, config)
    proto = pb.ModelConfig(name=name, max_batch_size=size)
    if fmt == "python":
        proto.backend = "python"
    else:
        proto.platform = LAYOUTS[fmt].platform
    for i, spec in enumerate(config.inputs):
        dims = [-1 if isinstance(d, str) else d for d in spec.dims][1 if size else 0 :]
        proto.input.add(
            name=io_name(fmt, spec.name, i), data_type=ensemble.data_type(pb, spec.dtype), dims=dims
        )
    for i, out in enumerate(config.outputs):
        dtype = str(golden["opt"].outputs[out.name].dtype)
        dims = _output_dims(golden, out.name, size)
        proto.output.add(name=io_name(fmt, out.name, i), data_type=ensemble.data_type(pb, dtype), dims=dims)
    if params.dynamic_batching is not None:
        proto.dynamic_batching.max_queue_delay_microseconds = params.dynamic_batching.max_queue_delay_us
        proto.dynamic_batching.preferred_batch_size.extend(params.dynamic_batching.preferred_batch_sizes)
    # The python format runs ONNX Runtime's CPU provider: its instances are CPU instances;
    # a TensorRT plan runs on GPUs only.
    kind = {"python": "KIND_CPU", "plan": "KIND_GPU"}.get(fmt) or {
        "auto": "KIND_AUTO",
        "cpu": "KIND_CPU",
        "gpu": "KIND_GPU",
    }[params.instance_group.kind]
    group = proto.instance_group.add(
        kind=pb.ModelInstanceGroup.Kind.Value(kind), count=params.instance_group.count
    )
    if fmt == "plan":
        group.profile.extend(str(p) for p in params.plan.profiles)
        proto.cc_model_filenames.update(params.plan.cc_model_filenames)
    # Read back by the smoke stage to pick the tolerance for this precision.
    proto.parameters["deploy_precision"].string_value = precision
    return proto


def _output_dims(golden: Any, name: str, max_batch_size: int) -> list[int]:
    from gates.references import varying_axes

    shape = golden["opt"].outputs[name].shape
    varying = varying_axes(golden, name)
    dims = [-1 if axis in varying else int(n) for axis, n in enumerate(shape)]
    return dims[1:] if max_batch_size else dims


def render(proto: Any) -> str:
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
    if source.suffix == ".onnx":
        from modelio import onnx_files

        onnx_files.copy(source, dest)  # with the weights file beside it, if any
    else:
        shutil.copyfile(source, dest)


SPEC = StageSpec(
    phase=Phase.PACKAGE,
    name="triton_config",
    version=5,  # 5: pre / post models and ensembles (preprocess, postprocess)
    params=TritonParams,
    inputs=("golden", "onnx", "onnx_int8", "onnx_fp16", "torchscript", "engine", "manifest"),
    outputs=(Artifact("repository", ArtifactKind.TREE, publish=Publish.REPOSITORY),),
    run=run,
    uses=frozenset({Section.NAME, Section.SHAPES}),
    env=("tritonclient", "protobuf", "onnx", "numpy"),
    check=check,
    identity=lambda p: ensemble.files(p.preprocess, p.postprocess),
    select_inputs=inputs_for,
    optional_inputs=frozenset({"engine", "manifest"}),
    # No trace stage (the torch.export path): the torchscript format is not written, and says so.
    if_configured=frozenset({"torchscript"}),
    publishes=when_all,
    provides=(Provides(PUBLISHING, lambda p: Publishing(p.publish, p.publish_to)),),
    description="Triton model repository: config.pbtxt (validated as ModelConfig) + model files",
    timeout_s=600,
)
