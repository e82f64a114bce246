"""The service around the served models: `<name>_pre`, `<name>_post` (Triton python
models) and one `<served>_ensemble` per served model wiring pre -> model -> post.

Checked up front against the shape spec (`check`), written as ModelConfig protobufs
like every other config (the stage renders and round-trips them).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Layout
from deploy.pipeline.errors import StageFailed
from deploy.serving import service
from deploy.serving.service import Classify, Embedding, ImagePre, Role, TextPre
from deploy.serving.service_record import (
    ClassifyRecord,
    EmbeddingRecord,
    EnsembleRecord,
    ImageRecord,
    PostRecord,
    PreRecord,
    TextRecord,
    read_record,
    service_name,
    write_record,
)
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import InputSpec

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

PRE_MODEL = Path(service.__file__).with_name("pre_model.py")
POST_MODEL = Path(service.__file__).with_name("post_model.py")
WHERE = "stages.triton_config"
ENSEMBLE_NOTE = "An ensemble has no model file: its steps are in ../config.pbtxt.\n"


def check(
    pre: ImagePre | TextPre | None, post: Classify | Embedding | None, config: DeployConfig
) -> list[Issue]:
    """Whether the pre-processing can feed the model's declared inputs and the
    post-processing reads one of its outputs, before anything runs."""
    if pre is None and post is None:
        return []
    issues = [] if config.batch_range() else [Issue(f"{WHERE}.preprocess", "a service needs a batch dim")]
    if pre is None:  # the client input of a service is images or text
        issues.append(
            Issue(f"{WHERE}.postprocess", "needs a preprocess (kind image or text) to make a service")
        )
    if isinstance(pre, ImagePre):
        issues += _image_issues(pre, config)
    if isinstance(pre, TextPre):
        issues += _text_issues(pre, config)
    if post is not None and _output(post, config) is None:
        names = [o.name for o in config.outputs]
        issues.append(Issue(f"{WHERE}.postprocess.output", f"'{post.output}' is not a model output {names}"))
    return issues


def image_input(pre: ImagePre, config: DeployConfig) -> InputSpec | None:
    if pre.input is None:
        return config.inputs[0] if len(config.inputs) == 1 else None
    return next((s for s in config.inputs if s.name == pre.input), None)


def _image_issues(pre: ImagePre, config: DeployConfig) -> list[Issue]:
    where, spec = f"{WHERE}.preprocess", image_input(pre, config)
    if spec is None:
        names = [s.name for s in config.inputs]
        return [Issue(f"{where}.input", f"names no single model input to feed (the model has {names})")]
    if len(spec.dims) != 4 or spec.dtype not in ("float32", "float16"):
        return [
            Issue(f"{where}.input", f"'{spec.name}' is {spec.dtype} {_dims(spec)}, not a float image batch")
        ]
    shape = spec.opt[1:]
    want = (
        (pre.channels, pre.crop, pre.crop)
        if pre.layout == Layout.NCHW
        else (pre.crop, pre.crop, pre.channels)
    )
    issues = []
    if tuple(shape) != want:
        issues.append(
            Issue(
                f"{where}.crop", f"makes {pre.layout} {list(want)}; input '{spec.name}' takes {list(shape)}"
            )
        )
    for name in ("mean", "std"):
        if len(getattr(pre, name)) != pre.channels:
            issues.append(Issue(f"{where}.{name}", f"needs {pre.channels} values for color {pre.color}"))
    return issues


def _dims(spec: InputSpec) -> str:
    return "[" + ", ".join(str(d) for d in spec.dims) + "]"


def feeds(pre: TextPre, config: DeployConfig) -> dict[str, str]:
    """Model input -> tokenizer output: the explicit `feeds`, else by Hugging Face name."""
    if pre.feeds:
        return {name: field.value for name, field in pre.feeds.items()}
    return {
        s.name: service.DEFAULT_FEEDS[s.name].value for s in config.inputs if s.name in service.DEFAULT_FEEDS
    }


def _text_issues(pre: TextPre, config: DeployConfig) -> list[Issue]:
    where, names = f"{WHERE}.preprocess", [s.name for s in config.inputs]
    issues = [Issue(f"{where}.feeds.{n}", f"not a model input {names}") for n in pre.feeds if n not in names]
    fed = feeds(pre, config)
    unfed = [n for n in names if n not in fed]
    if unfed:
        issues.append(
            Issue(f"{where}.feeds", f"no tokenizer output feeds model input(s) {unfed}: name them in feeds")
        )
    for spec in (s for s in config.inputs if s.name in fed):
        if len(spec.dims) != 2 or spec.dtype not in ("int64", "int32"):
            issues.append(
                Issue(
                    f"{where}.feeds.{spec.name}",
                    f"takes {spec.dtype} {_dims(spec)}, not [batch, seq] integers",
                )
            )
    longest = max((s.max[1] for s in config.inputs if len(s.max) == 2), default=None)
    if pre.max_length is not None and longest is not None and pre.max_length > longest:
        issues.append(
            Issue(f"{where}.max_length", f"{pre.max_length} exceeds the shape spec's max sequence {longest}")
        )
    return issues


def _output(post: Classify | Embedding, config: DeployConfig) -> str | None:
    names = [o.name for o in config.outputs]
    if post.output is None:
        return names[0] if len(names) == 1 else None
    return post.output if post.output in names else None


def files(pre: ImagePre | TextPre | None, post: Classify | Embedding | None) -> dict[str, str]:
    """The digests of the files copied into the repository that no param states: the
    python models this release ships and the service's tokenizer / labels (their paths
    are params, their contents are not), for the cache key."""
    import hashlib

    from deploy.serving.layout import PYTHON_MODEL

    paths = {
        "python_model": PYTHON_MODEL,
        "pre_model": PRE_MODEL if pre is not None else None,
        "post_model": POST_MODEL if post is not None else None,
        "tokenizer": pre.tokenizer if isinstance(pre, TextPre) else None,
        "labels": post.labels if isinstance(post, Classify) else None,
    }
    return {
        role: hashlib.sha256(path.read_bytes()).hexdigest()
        for role, path in paths.items()
        if path is not None
    }


def count_labels(post: Classify | Embedding | None, classes: int) -> None:
    """A labels file must name every class the model scores, no more."""
    if not isinstance(post, Classify) or post.labels is None:
        return
    lines = len(post.labels.read_text(encoding="utf-8").splitlines())
    if lines != classes:
        raise StageFailed(
            f"{WHERE}.postprocess.labels: {post.labels} has {lines} lines; the model scores {classes} classes"
        )


def pre_record(pre: ImagePre | TextPre, config: DeployConfig) -> PreRecord:
    """What the pre model reads (its files named as in its version directory)."""
    if isinstance(pre, ImagePre):
        spec = image_input(pre, config)
        assert spec is not None  # check() ran
        return ImageRecord(**pre.model_dump(exclude={"input", "kind"}), feed=spec.name)
    seq = [s for s in config.inputs if s.name in feeds(pre, config)]
    return TextRecord(
        tokenizer=service.TOKENIZER_FILE,
        max_length=pre.max_length or max(s.max[1] for s in seq),
        min_length=max(s.min[1] for s in seq),
        feeds=feeds(pre, config),
        max_bytes=pre.max_bytes,
    )


def post_record(post: Classify | Embedding, config: DeployConfig) -> PostRecord:
    reads = post_output(post, config)
    if isinstance(post, Embedding):
        return EmbeddingRecord(reads=reads, normalize=post.normalize)
    labels = service.LABELS_FILE if post.labels else None
    return ClassifyRecord(reads=reads, softmax=post.softmax, top_k=post.top_k, labels=labels)


def write_parts(
    root: Path,
    version: int,
    protos: dict[Role, ModelConfig],
    pre: ImagePre | TextPre | None,
    post: Classify | Embedding | None,
) -> None:
    """The pre / post models' files: model.py (+ tokenizer.json / labels.txt)."""
    for role, proto in protos.items():
        folder = root / proto.name / str(version)
        folder.mkdir(parents=True)
        shutil.copyfile(PRE_MODEL if role is Role.PRE else POST_MODEL, folder / "model.py")
        if role is Role.PRE and isinstance(pre, TextPre):
            shutil.copyfile(pre.tokenizer, folder / service.TOKENIZER_FILE)
        if role is Role.POST and isinstance(post, Classify) and post.labels is not None:
            shutil.copyfile(post.labels, folder / service.LABELS_FILE)


def post_output(post: Classify | Embedding, config: DeployConfig) -> str:
    name = _output(post, config)
    assert name is not None  # check() ran
    return name


# -- config.pbtxt of each part ----------------------------------------------------------------
def data_type(pb: ModuleType, dtype: str) -> int:
    from deploy.serving.layout import TRITON_TYPES

    if dtype not in TRITON_TYPES:
        raise StageFailed(f"no Triton data type for {dtype}")
    return int(pb.DataType.Value(TRITON_TYPES[dtype]))


def _python_model(pb: ModuleType, name: str, size: int, instances: int) -> ModelConfig:
    proto = pb.ModelConfig(name=name, backend="python", max_batch_size=size)
    proto.instance_group.add(kind=pb.ModelInstanceGroup.Kind.Value("KIND_CPU"), count=instances)
    proto.dynamic_batching.SetInParent()  # requests of several clients reach one execute()
    return proto


def pre_proto(
    pb: ModuleType, name: str, pre: ImagePre | TextPre, config: DeployConfig, size: int, instances: int
) -> ModelConfig:
    proto = _python_model(pb, name, size, instances)
    text = isinstance(pre, TextPre)
    proto.input.add(name=service.PRE_INPUT, data_type=pb.TYPE_STRING, dims=[1])
    record = pre_record(pre, config)
    fed = record.feeds if isinstance(record, TextRecord) else {record.feed: "pixels"}
    for spec in (s for s in config.inputs if s.name in fed):
        dims = [-1] * (len(spec.dims) - 1) if text else list(spec.opt[1:])
        proto.output.add(name=spec.name, data_type=data_type(pb, spec.dtype), dims=dims)
    write_record(proto, Role.PRE, record)
    return proto


def post_proto(
    pb: ModuleType,
    name: str,
    post: Classify | Embedding,
    config: DeployConfig,
    source: tuple[str, list[int]],
    size: int,
    instances: int,
) -> ModelConfig:
    """`source`: the dtype and per-item dims of the model output it reads."""
    proto = _python_model(pb, name, size, instances)
    dtype, dims = source
    proto.input.add(name="values", data_type=data_type(pb, dtype), dims=dims)
    for out in outputs(pb, post, dims):
        proto.output.append(out)
    write_record(proto, Role.POST, post_record(post, config))
    return proto


def outputs(pb: ModuleType, post: Classify | Embedding, dims: list[int]) -> list[Any]:
    """What the post model (and so the ensemble) answers: top-k scores, classes and labels,
    or the embedding."""
    if isinstance(post, Embedding):
        return [pb.ModelOutput(name="embedding", data_type=pb.TYPE_FP32, dims=dims)]
    classes = 1
    for n in dims:
        classes *= n
    k = min(post.top_k, classes)
    return [
        pb.ModelOutput(name="scores", data_type=pb.TYPE_FP32, dims=[k]),
        pb.ModelOutput(name="classes", data_type=pb.TYPE_INT64, dims=[k]),
        pb.ModelOutput(name="labels", data_type=pb.TYPE_STRING, dims=[k]),
    ]


def ensemble_proto(
    pb: ModuleType,
    model: ModelConfig,
    config: DeployConfig,
    pre: ModelConfig | None,
    post: ModelConfig | None,
) -> ModelConfig:
    """`<model>_ensemble`: pre -> model -> post, for the served model's config `model`
    (whose I/O names are the served ones, e.g. input__0 for torchscript)."""
    proto = pb.ModelConfig(
        name=service_name(model.name, Role.ENSEMBLE), platform="ensemble", max_batch_size=model.max_batch_size
    )
    steps = proto.ensemble_scheduling.step
    names = [s.name for s in config.inputs]
    if pre is not None:
        client = (
            service.IMAGE_INPUT
            if isinstance(read_record(pre.parameters), ImageRecord)
            else service.TEXT_INPUT
        )
        proto.input.add(name=client, data_type=pb.TYPE_STRING, dims=[1])
        step = steps.add(model_name=pre.name, model_version=-1)
        step.input_map[service.PRE_INPUT] = client
        step.output_map.update({o.name: f"pre_{o.name}" for o in pre.output})
    else:
        proto.input.extend(
            pb.ModelInput(name=n, data_type=i.data_type, dims=i.dims) for n, i in zip(names, model.input)
        )
    step = steps.add(model_name=model.name, model_version=-1)
    step.input_map.update({i.name: f"pre_{n}" if pre is not None else n for n, i in zip(names, model.input)})
    _model_outputs(pb, proto, step, model, config, post)
    wiring = EnsembleRecord(model=model.name, pre=pre.name if pre else None, post=post.name if post else None)
    write_record(proto, Role.ENSEMBLE, wiring)
    return proto


def _model_outputs(
    pb: ModuleType,
    proto: ModelConfig,
    step: Any,
    model: ModelConfig,
    config: DeployConfig,
    post: ModelConfig | None,
) -> None:
    outs = [o.name for o in config.outputs]
    if post is None:
        step.output_map.update({o.name: n for n, o in zip(outs, model.output)})
        proto.output.extend(
            pb.ModelOutput(name=n, data_type=o.data_type, dims=o.dims) for n, o in zip(outs, model.output)
        )
        return
    record = read_record(post.parameters)
    assert isinstance(record, ClassifyRecord | EmbeddingRecord)  # written by post_proto
    read = record.reads
    step.output_map[model.output[outs.index(read)].name] = "model_out"
    last = proto.ensemble_scheduling.step.add(model_name=post.name, model_version=-1)
    last.input_map["values"] = "model_out"
    last.output_map.update({o.name: o.name for o in post.output})
    proto.output.extend(post.output)
