"""build: a TensorRT engine from the ONNX model (FP32, FP16 or Q/DQ INT8).

Written against the TensorRT 10 / 11 Python API (type-checked with mypy against
tensorrt-stubs); **not run on real TensorRT on the development machines or in CI**
(its builder libraries cannot be installed there, and there is no GPU). Without
TensorRT or a GPU the stage is *skipped* with the reason, or fails when `required`.

Precision per TensorRT version: 10 builds FP32 / FP16 weakly typed (the FP16 builder
flag) or strongly typed for Q/DQ models; 11 removed weak typing, so every build is
strongly typed and precision comes from the ONNX (an FP16 or Q/DQ model).
The plan is written as raw engine bytes (a header inside it breaks Triton); the
provenance manifest and layer information go beside it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from deploy.domain.artifacts import ENGINE, LAYERS, MANIFEST, TIMING_CACHE
from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Precision
from deploy.pipeline.errors import StageFailed, StageSkipped
from deploy.pipeline.graph.contract import Artifact, Section, StageContext, StageSpec
from deploy.runtimes.devices import gpu_identity, tensorrt_version
from deploy.runtimes.engine_manifest import EngineManifest, ShapeRange
from deploy.spec.config import DeployConfig

if TYPE_CHECKING:
    import tensorrt as trt

Source = Literal["fp32", "fp16", "int8"]


class ProfileShapes(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    min: tuple[int, ...] = Field(description="Smallest full shape of this input in this profile.")
    opt: tuple[int, ...] = Field(description="The shape TensorRT optimises this profile for.")
    max: tuple[int, ...] = Field(description="Largest full shape of this input in this profile.")


class Profile(BaseModel):
    """One optimization profile; inputs not listed take the shape spec's min/opt/max."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str = Field(description="Profile name, unique (recorded in the engine manifest).")
    shapes: dict[str, ProfileShapes] = Field(
        default_factory=dict,
        description="Input name -> its shapes in this profile; inputs not listed take the shape spec's.",
    )


class BuildParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    source: Source = Field(
        "fp32",
        description="Which ONNX: fp32 the exported (simplified) one, fp16 the fp16 stage's, int8 quantize's Q/DQ.",
    )
    profiles: tuple[Profile, ...] = Field(
        (Profile(name="default"),), min_length=1, description="TensorRT optimization profiles, in order."
    )
    workspace_mib: int = Field(4096, ge=1, description="TensorRT workspace memory pool limit, MiB.")
    optimization_level: int = Field(3, ge=0, le=5, description="TensorRT builder optimization level.")
    # TensorRT 10 only: weakly typed FP16 for an FP32 source (TensorRT 11 rejects it).
    fp16: bool = Field(
        False, description="TensorRT 10 only: allow FP16 kernels for an FP32 source (weak typing)."
    )
    version_compatible: bool = Field(
        False, description="Build a version-compatible engine (runs on later TensorRT versions)."
    )
    hardware_compatibility: Literal["none", "ampere_plus", "same_compute_capability"] = Field(
        "none", description="TensorRT hardware compatibility level: which other GPUs the engine may run on."
    )
    # Fail, rather than skip, where TensorRT or a GPU is missing.
    required: bool = Field(False, description="Fail, rather than skip, where TensorRT or a GPU is missing.")


def source_artifact(params: BuildParams) -> str:
    return "onnx" if params.source == Precision.FP32 else f"onnx_{params.source}"


# -- derivations (unit-tested with a fake that follows the stubs) ---------------------------
def profile_shapes(config: DeployConfig, profile: Profile) -> dict[str, ProfileShapes]:
    return {
        spec.name: profile.shapes.get(spec.name) or ProfileShapes(min=spec.min, opt=spec.opt, max=spec.max)
        for spec in config.inputs
    }


def major_version(version: str) -> int:
    return int(version.split(".")[0])


def strongly_typed(params: BuildParams, major: int) -> bool:
    """TensorRT 11 has only strongly typed networks; on 10, Q/DQ and FP16 sources are
    built strongly typed (their types are in the ONNX) and FP32 weakly typed."""
    return major >= 11 or params.source != Precision.FP32


def network_flags(trt_module: Any, params: BuildParams, major: int) -> int:
    if strongly_typed(params, major):
        return 1 << int(trt_module.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return 0  # explicit batch is implicit since TensorRT 10


def builder_flags(trt_module: Any, params: BuildParams, major: int) -> list[Any]:
    if params.fp16 and strongly_typed(params, major):
        raise StageFailed(
            "build.fp16 is a weak-typing flag: TensorRT 11 (and strongly typed Q/DQ / FP16 builds) "
            "take precision from the ONNX; use source: fp16 (the fp16 stage's model) instead"
        )
    flags = [trt_module.BuilderFlag.FP16] if params.fp16 else []
    if params.version_compatible:
        flags.append(trt_module.BuilderFlag.VERSION_COMPATIBLE)
    return flags


def check(params: BuildParams, config: DeployConfig) -> list[Issue]:
    issues = []
    names = {spec.name: spec for spec in config.inputs}
    for i, profile in enumerate(params.profiles):
        for name, shapes in profile.shapes.items():
            where = f"stages.build.profiles[{i}].shapes.{name}"
            if name not in names:
                issues.append(Issue(where, f"no input '{name}' in the shape spec"))
                continue
            issues += [Issue(where, p) for p in _profile_problems(shapes, names[name].dims)]
    if len({p.name for p in params.profiles}) != len(params.profiles):
        issues.append(Issue("stages.build.profiles", "profile names must be unique"))
    return issues


def _profile_problems(shapes: ProfileShapes, dims: tuple[int | str, ...]) -> list[str]:
    if not len(shapes.min) == len(shapes.opt) == len(shapes.max) == len(dims):
        return [f"min/opt/max need {len(dims)} dims each"]
    problems = [
        f"dim {a}: need min <= opt <= max"
        for a, (lo, mid, hi) in enumerate(zip(shapes.min, shapes.opt, shapes.max))
        if not lo <= mid <= hi
    ]
    problems += [
        f"dim {a} is static {d} in the shape spec"
        for a, d in enumerate(dims)
        if isinstance(d, int) and {shapes.min[a], shapes.opt[a], shapes.max[a]} != {d}
    ]
    return problems


# -- identity: TensorRT version + GPU, without importing tensorrt ----------------------------
def identity(params: BuildParams) -> Mapping[str, object]:
    version = tensorrt_version()
    return {"tensorrt": version, "gpu": gpu_identity()}


def host(params: BuildParams, config: DeployConfig) -> list[Issue]:
    """Said by validate and plan: no engine can be built here, and what the run does then."""
    del config
    from deploy.runtimes.host import cuda_gpus

    if tensorrt_version() is None:
        why = "TensorRT is not installed (pip install tensorrt where NVIDIA's index is reachable)"
    elif not cuda_gpus():
        why = "no NVIDIA GPU on this machine"
    else:
        return []
    then = (
        "the run fails (build.required)"
        if params.required
        else "the stage is skipped, and so is every TensorRT row"
    )
    return [Issue("stages.build", f"{why}; {then}")]


# -- the build ---------------------------------------------------------------------------------
def _tensorrt(params: BuildParams) -> Any:
    try:
        import tensorrt
    except ImportError as exc:
        _unavailable(
            params,
            f"TensorRT is not installed ({exc}); pip install tensorrt where NVIDIA's index is reachable",
        )
    if not hasattr(tensorrt, "Builder"):  # e.g. only a stubs package: a namespace with no library
        _unavailable(
            params, "the installed 'tensorrt' has no builder (bindings without libraries, or stubs only)"
        )
    if gpu_identity() is None:
        _unavailable(params, "no NVIDIA GPU (nvidia-smi found none)")
    return tensorrt


def _unavailable(params: BuildParams, why: str) -> None:
    if params.required:
        raise StageFailed(f"TensorRT engine required but {why}")
    raise StageSkipped(why)


def run(ctx: StageContext, params: BuildParams) -> None:
    trt_module = _tensorrt(params)
    major = major_version(trt_module.__version__)
    # Annotated with the stubs' types so that mypy checks every call below.
    logger: trt.ILogger = trt_module.Logger(trt_module.Logger.WARNING)
    builder: trt.Builder = trt_module.Builder(logger)
    network: trt.INetworkDefinition = builder.create_network(network_flags(trt_module, params, major))
    parser: trt.OnnxParser = trt_module.OnnxParser(network, logger)
    if not parser.parse_from_file(str(ctx.input(source_artifact(params)))):
        errors = [str(parser.get_error(i).desc()) for i in range(parser.num_errors)]
        raise StageFailed("TensorRT's ONNX parser failed: " + "; ".join(errors))
    slot = timing_cache_slot(ctx, trt_module.__version__)
    config = _builder_config(trt_module, builder, params, major, ctx.config, slot)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise StageFailed("TensorRT could not build the engine (see the stage log)")
    ctx.output(ENGINE).write_bytes(bytes(plan))  # raw engine bytes only: Triton reads them as is
    timing = bytes(config.get_timing_cache().serialize())
    ctx.output(TIMING_CACHE).write_bytes(timing)
    if slot is not None:
        _save_slot(slot, timing)
    _describe(ctx, trt_module, logger, bytes(plan), params, major)


def timing_cache_slot(ctx: StageContext, version: str) -> Path | None:
    """The timing cache carried from build to build: one per TensorRT version and GPU,
    as TensorRT requires (a cache from another version or device is invalid)."""
    gpu = gpu_identity()
    if ctx.persistent is None or gpu is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", f"{version}_{gpu}").strip("_")
    return ctx.persistent / f"timing_{slug}.cache"


def _save_slot(slot: Path, data: bytes) -> None:
    slot.parent.mkdir(parents=True, exist_ok=True)
    tmp = slot.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(slot)


def _builder_config(
    trt_module: Any,
    builder: trt.Builder,
    params: BuildParams,
    major: int,
    deploy: DeployConfig,
    slot: Path | None,
) -> trt.IBuilderConfig:
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt_module.MemoryPoolType.WORKSPACE, params.workspace_mib << 20)
    config.builder_optimization_level = params.optimization_level
    for flag in builder_flags(trt_module, params, major):
        config.set_flag(flag)
    if params.hardware_compatibility != "none":
        level = {"ampere_plus": "AMPERE_PLUS", "same_compute_capability": "SAME_COMPUTE_CAPABILITY"}[
            params.hardware_compatibility
        ]
        config.hardware_compatibility_level = getattr(trt_module.HardwareCompatibilityLevel, level)
    for profile in params.profiles:
        config.add_optimization_profile(_profile(trt_module, builder, profile_shapes(deploy, profile)))
    previous = slot.read_bytes() if slot is not None and slot.is_file() else b""
    config.set_timing_cache(config.create_timing_cache(previous), False)
    return config


def _profile(
    trt_module: Any, builder: trt.Builder, shapes: dict[str, ProfileShapes]
) -> trt.IOptimizationProfile:
    profile = builder.create_optimization_profile()
    for name, s in shapes.items():
        # Dims takes a list[int] (tensorrt-stubs); pybind would take a tuple too, the stubs don't.
        profile.set_shape(
            name, trt_module.Dims(list(s.min)), trt_module.Dims(list(s.opt)), trt_module.Dims(list(s.max))
        )
    return profile


def _describe(
    ctx: StageContext, trt_module: Any, logger: trt.ILogger, plan: bytes, params: BuildParams, major: int
) -> None:
    runtime: trt.Runtime = trt_module.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(plan)
    inspector = engine.create_engine_inspector()
    ctx.output(LAYERS).write_text(inspector.get_engine_information(trt_module.LayerInformationFormat.JSON))
    manifest = EngineManifest(
        tensorrt=trt_module.__version__,
        gpu=gpu_identity(),
        source=params.source,
        source_onnx_sha256=_sha256(ctx.input(source_artifact(params)).read_bytes()),
        strongly_typed=strongly_typed(params, major),
        fp16_flag=params.fp16,
        version_compatible=params.version_compatible,
        hardware_compatibility=params.hardware_compatibility,
        profiles={p.name: _ranges(profile_shapes(ctx.config, p)) for p in params.profiles},
    )
    ctx.output(MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1))
    ctx.headline(f"TensorRT {trt_module.__version__} on {manifest.gpu}: {len(params.profiles)} profile(s)")


def _ranges(shapes: dict[str, ProfileShapes]) -> dict[str, ShapeRange]:
    return {name: ShapeRange(list(s.min), list(s.opt), list(s.max)) for name, s in shapes.items()}


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


SPEC = StageSpec(
    name="build",
    version=2,  # 2: manifest.json a versioned record (runtimes/engine_manifest.py)
    params=BuildParams,
    inputs=("onnx", "onnx_int8", "onnx_fp16"),
    outputs=(
        Artifact("engine", filename="model.plan"),
        Artifact("manifest", filename="manifest.json"),
        Artifact("layers", filename="layers.json"),
        Artifact("timing_cache", filename="timing.cache"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnx",),
    identity=identity,
    check=check,
    host=host,
    select_inputs=lambda p: (source_artifact(p),),
    description="TensorRT engine with optimization profiles from the shape spec (skipped without TensorRT / GPU)",
    timeout_s=7200,
)
