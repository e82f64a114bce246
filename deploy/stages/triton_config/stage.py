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
from typing import TYPE_CHECKING, Any

from deploy.domain.artifacts import BATCHING, GENERATIONS, GOLDEN, MANIFEST, REPOSITORY
from deploy.domain.naming import model_name
from deploy.domain.vocabulary import ModelSuffix, Precision, ServingFormat
from deploy.gates.batch_independence import BatchIndependence
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import (
    Artifact,
    ArtifactKind,
    Phase,
    Publish,
    Section,
    StageContext,
    StageSpec,
)
from deploy.pipeline.graph.facts import Provides
from deploy.runtimes.catalog import OPENVINO_FORMATS, serving
from deploy.runtimes.engine_manifest import EngineManifest
from deploy.serving.generate_record import generate_names
from deploy.serving.layout import (
    LAYOUTS,
    PYTHON_MODEL,
    io_name,
)
from deploy.serving.publishing import PUBLISHING, Publishing, when_all
from deploy.serving.service import Role
from deploy.serving.service_record import service_name
from deploy.spec.config import DeployConfig
from deploy.stages.triton_config import batching, ensemble, generate, production
from deploy.stages.triton_config.params import TritonParams
from deploy.stages.triton_config.proto import dynamic_batching, max_batch, model_config, output_dims, render
from deploy.stages.triton_config.validation import check, check_engine_batch

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from deploy.gates.references import Golden


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
    return (
        "golden",
        "batching",
        "generations",
        *dict.fromkeys(s.artifact for s in served(params, "x")),
        *extra,
    )


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
    services = _write_service(ctx, params, golden, protos) + _write_generate(ctx, params, models)
    ctx.record("models", [m.model for m in models])
    if services:
        ctx.record("services", services)
    ctx.headline(", ".join([m.model for m in models] + services))


def _bf16_host(params: TritonParams) -> dict[str, object]:
    """Whether bf16 models are written depends on the CPU (`_where_computable`): its model
    is in the key when they are asked for."""
    from deploy.runtimes.devices import host_identity

    return {"host_cpu": host_identity()["host_cpu"]} if "bf16" in params.precisions else {}


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
        source = (str(golden["opt"].outputs[reads].dtype), output_dims(golden, reads, size))
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


def _write_generate(ctx: StageContext, params: TritonParams, models: list[ServedModel]) -> list[str]:
    """A decoder's generate and streaming models beside each python-backend step; their names."""
    from tritonclient.grpc import model_config_pb2 as pb

    if ctx.config.model.decoder is None:
        return []
    from deploy.gates.generations import Generations

    root, written = ctx.output(REPOSITORY), []
    stop = Generations.read(ctx.input(GENERATIONS)).stop  # the model's eos: generate's default stop
    # A reduced-precision step is here only when its stage's generation gate passed.
    for entry in [m for m in models if m.fmt in generate.GENERATING]:
        for record, name in zip(
            generate.records(entry.model, entry.fmt, entry.precision.value, ctx.config, stop),
            generate_names(entry.model),
        ):
            text = _written(ctx, generate.proto(pb, name, record, params, entry.fmt))
            generate.write(root, params.version, root / entry.model, record, text, name, ctx.config)
            written.append(name)
    return written


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
    version=13,  # 13: a decoder's generate models stop at the model's eos by default (golden's generations); 12: a decoder's tokenizer in its generate models (text in, text out); 11: reduced-precision decoder steps get generate models too (their stage gates generation); 10: a decoder's generate and generate_stream models; 9: python_inductor at fp16 and bf16 (the inductor_fp16 / inductor_bf16 packages); 8: python_inductor (an AOTInductor package in the python backend; model.py loads it); 7: OpenVINO formats, deploy_format in every config; 6: dynamic batching refused for batch-dependent outputs of any served precision
    params=TritonParams,
    inputs=(
        "golden",
        "batching",
        "generations",
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
