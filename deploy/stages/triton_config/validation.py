"""What triton_config refuses before it writes anything (the stage's `check` and
`host`): batch sizes the shape spec and an engine cannot serve, scalars that cannot be
batched, production settings that cannot apply, precisions no listed format serves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploy.domain.issues import Issue
from deploy.pipeline.errors import StageFailed
from deploy.runtimes.bf16_gate import bf16_gated
from deploy.runtimes.catalog import CATALOG, OPENVINO_FORMATS, serving
from deploy.runtimes.engine_manifest import EngineManifest
from deploy.serving.layout import (
    LAYOUTS,
)
from deploy.serving.publishing import PublishPolicy
from deploy.spec.config import DeployConfig
from deploy.stages.triton_config import ensemble
from deploy.stages.triton_config.params import InstanceKind, TritonParams
from deploy.stages.triton_config.proto import dynamic_batching, max_batch

if TYPE_CHECKING:
    pass


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
    issues += _unserved(params) + _spaced(params, config)
    if "bf16" in params.precisions and openvino_formats(params) and not bf16_gated(config):
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


def check_engine_batch(manifest: EngineManifest, params: TritonParams, size: int) -> None:
    """Triton refuses a plan whose profiles can't take max_batch_size ("configuration
    specified max-batch N but TensorRT engine only supports max-batch M")."""
    engine_max = manifest.max_batch(list(params.plan.profiles))
    if size > engine_max:
        raise StageFailed(f"max_batch_size {size} exceeds the engine's profiles' max batch {engine_max}")


def _spaced(params: TritonParams, config: DeployConfig) -> list[Issue]:
    """Triton's python backend starts its stub through a shell command line: from a path
    with a space the stub dies (`std::invalid_argument: stol`) and the server never comes
    up; from one with a non-ASCII character its models fail to load (the stub reads paths
    as ASCII: UnicodeEncodeError), after every stage before smoke has run."""
    python = ", ".join(f for f in params.formats if LAYOUTS[f].backend == "python")
    places = {"repository": config.repository, "cache_dir": config.cache_dir}  # smoke serves from the cache
    found = {
        k: (str(p.absolute()), why) for k, p in places.items() if (why := _unservable(str(p.absolute())))
    }
    return [
        Issue(
            k,
            f"{p!r} {why}: the python backend's stub cannot start from it ({python} formats); choose another path",
        )
        for k, (p, why) in found.items()
        if python
    ]


def _unservable(path: str) -> str | None:
    if any(c.isspace() for c in path):
        return "has a space"
    return None if path.isascii() else "has a non-ASCII character"


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


def openvino_formats(params: TritonParams) -> bool:
    return any(f in OPENVINO_FORMATS for f in params.formats)
