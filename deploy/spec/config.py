"""The YAML schema's shared part: the pipeline's name, the model's source, its tensors
(spec/tensors.py) and where the cache, the repository and the run reports go. Stage
parameters are validated against the models their stages declare (pipeline/graph/project.py).

Why the spec is a package of its own, below the engine: every stage reads it and its
`uses` key component hashes it, and the engine validates it once, up front, with every
other config error; but it is the domain's model of what is deployed, not the engine's
machinery, so it imports neither the engine nor a stage (tests/test_layers.py).
Stage-to-stage checks against it (profiles, max_batch_size) are the stages' own `check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from deploy.spec.tensors import Decoder, Detections, DimName, Frozen, InputsBy, InputSpec, OutputSpec

# Triton model names become directory and file names (with suffixes such as
# `_python_int8_ensemble`): short enough for any file system's 255-byte names.
MAX_NAME = 64
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
FACTORY_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
REMOTE_PATTERN = r"^(s3|gs|gcs|az|abfs|file)://.+"
ModelName = Annotated[str, Field(max_length=MAX_NAME, pattern=NAME_PATTERN)]
FactoryPath = Annotated[str, Field(pattern=FACTORY_PATTERN)]
# What a pattern asks for, in words (a config error says this, not the regex).
PATTERN_WORDS = {
    NAME_PATTERN: "a name of letters, digits, '_', '.' and '-' (it becomes directory names)",
    REMOTE_PATTERN: "a URL of s3://, gs://, gcs://, az://, abfs:// or file://",
    FACTORY_PATTERN: "'module:callable', e.g. torchvision.models:resnet50 (a colon before the function, "
    "not a dot; a model in a local .py file: its file and callable)",
}


def error_text(err: Mapping[str, Any]) -> str:
    """One pydantic error in the config's words."""
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required"
    words = PATTERN_WORDS.get(str(err.get("ctx", {}).get("pattern")))
    if err["type"] == "string_pattern_mismatch" and words:
        return f"{err.get('input')!r} is not {words}"
    return str(err["msg"]).removeprefix("Value error, ")


CHECKPOINT_SUFFIXES = (".pt", ".pth", ".safetensors")


def resolve_path(value: Path | None, info: ValidationInfo) -> Path | None:
    """Relative paths in a config are relative to the config file's directory; `~` is the
    home directory (a literal `./~` directory invited an `rm -rf ~`)."""
    base = (info.context or {}).get("base_dir")
    value = value.expanduser() if value is not None else None
    if value is None or value.is_absolute() or base is None:
        return value
    return Path(base) / value


def _existing_file(value: Path | None, info: ValidationInfo) -> Path | None:
    path = resolve_path(value, info)
    if path is not None and path.is_dir():
        raise ValueError(f"{path} is a directory, not a file")
    if path is not None and path.exists() and not path.is_file():  # a FIFO, /dev/zero, a socket
        raise ValueError(f"{path} is not a regular file")
    if path is not None and not path.is_file():
        raise ValueError(f"file not found: {path}")
    return path


class ModelSource(Frozen):
    """Exactly one of: an import path, a local Python file + callable, a TorchScript file."""

    factory: FactoryPath | None = Field(
        None,
        description="Import path `module:callable` of a function returning the nn.Module (e.g. torchvision.models:resnet50).",
    )
    file: Path | None = Field(None, description="A local Python file defining the model (with `callable`).")
    callable: Annotated[str, Field(pattern=r"^[A-Za-z_]\w*$")] | None = Field(
        None, description="The function in `file` that returns the nn.Module."
    )
    torchscript: Path | None = Field(None, description="An existing TorchScript file, used as it is.")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments passed to the factory / callable."
    )
    checkpoint: Path | None = Field(
        None, description="A state_dict loaded into the model: .pt, .pth or .safetensors."
    )
    forward_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Fixed values for forward's arguments that are not model inputs (`{return_features: false}`); "
        "arguments with defaults that are not given keep their defaults. Neither exporter makes them graph inputs.",
    )
    decoder: Decoder | None = Field(
        None,
        description="A causal decoder exported with its key/value cache (`deploy init` writes it for a model whose "
        "forward returns a cache): inputs input_ids and past_key_values.N.key/value, outputs logits and "
        "present.N.key/value. null: the model is exported as it is.",
    )
    detections: Detections | None = Field(
        None,
        description="The model returns a list with one dict of variable-length tensors per image (torchvision "
        "detection): pad them to a fixed number of rows, with a per-image count. null: it returns tensors.",
    )
    inputs_by: InputsBy = Field(
        InputsBy.AUTO,
        description="How the inputs are passed to forward: `position` (in declared order), `keyword` "
        "(`forward(input_ids=..., attention_mask=...)`), or `auto`: by keyword where every input name is a "
        "parameter of forward or forward takes only `**kwargs`, else by position.",
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**32 - 1,  # what torch.manual_seed and numpy's generators take alike
        description="Seeds random initialisation and the golden inputs, so runs are reproducible.",
    )
    golden_inputs: Path | None = Field(
        None,
        description="An .npz of golden inputs, keyed by input name (used at every shape: each array is cut to the "
        "min / opt / max shape from its start) or by `<min|opt|max>.<input>` (used as it is); for inputs random "
        "values cannot represent (token ids of real text, masks, images). Inputs it lacks are drawn at random.",
    )

    _files = field_validator("file", "torchscript", "checkpoint", "golden_inputs")(_existing_file)

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint_suffix(cls, value: Path | None) -> Path | None:
        if value is not None and value.suffix not in CHECKPOINT_SUFFIXES:
            raise ValueError(f"checkpoint must be one of {', '.join(CHECKPOINT_SUFFIXES)}")
        return value

    @field_validator("golden_inputs")
    @classmethod
    def _npz_suffix(cls, value: Path | None) -> Path | None:
        if value is not None and value.suffix != ".npz":
            raise ValueError("golden_inputs must be an .npz file (numpy.savez), keyed by input name")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ModelSource:
        given = [k for k in ("factory", "file", "torchscript") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of factory / file / torchscript (got {given or 'none'})")
        if (self.file is None) != (self.callable is None):
            raise ValueError("'file' and 'callable' go together")
        if self.torchscript is not None and (self.kwargs or self.checkpoint):
            raise ValueError("a torchscript source takes no kwargs or checkpoint")
        return self

    def factory_here(self) -> Path | None:
        """The factory's top-level module as `python -m` finds it first: a `<name>.py` or a
        package `<name>/` in the working directory (the `deploy` script's own path does not
        hold it); None where there is none."""
        if self.factory is None:
            return None
        top = self.factory.split(":")[0].split(".")[0]
        for found in (Path.cwd() / f"{top}.py", Path.cwd() / top / "__init__.py"):
            if found.is_file():
                return found
        return None

    @property
    def kind(self) -> Literal["factory", "file", "torchscript"]:
        if self.factory is not None:
            return "factory"
        return "file" if self.file is not None else "torchscript"


class CacheConfig(Frozen):
    remote: str | None = Field(
        None,
        pattern=REMOTE_PATTERN,
        description="A shared remote cache behind the local one (s3://bucket/prefix, gs://, az://, or file:// on a "
        "shared file system); overridden by $DEPLOY_CACHE_REMOTE. Credentials come from the environment / profile.",
    )
    endpoint_url: str | None = Field(
        None,
        description="An S3-compatible server (MinIO, Ceph, moto), e.g. http://minio:9000; null: AWS, or "
        "$AWS_ENDPOINT_URL where set.",
    )
    push: bool = Field(
        True, description="Upload what a run builds (objects first, the entry last); false: read only."
    )


class DeployConfig(Frozen):
    name: ModelName = Field(
        description="Pipeline name, the prefix of the Triton model names: letters, digits, `_`, `.` and `-`, not starting with `.` or `-`; at most 64 characters."
    )
    model: ModelSource = Field(
        description="Where the model comes from: exactly one of `factory`, `file` + `callable`, `torchscript`."
    )
    inputs: tuple[InputSpec, ...] = Field(
        min_length=1,
        description="One shape spec per input: the single source of ONNX dynamic axes, TensorRT profiles and Triton dims.",
    )
    outputs: tuple[OutputSpec, ...] = Field(min_length=1, description="The model's outputs, in order.")
    # The named dim that is axis 0 of every input; null for a model without batching.
    batch_dim: DimName | None = Field(
        "batch", description="The named dim that is axis 0 of every input; null for a model without batching."
    )
    cache_dir: Path = Field(
        Path(".deploy-cache"),
        description="Artifact store; overridden by $DEPLOY_CACHE_DIR and by --cache-dir.",
    )
    cache: CacheConfig = Field(CacheConfig(), description="The remote cache shared by several machines.")
    repository: Path = Field(
        Path("model_repository"), description="Where the Triton model repository is published."
    )
    run_dir: Path = Field(
        Path("runs"),
        description="Run records: `<run_dir>/<name>/summary.json` and `<run_dir>/<name>/logs/<stage>.log`.",
    )
    # Key order means nothing (pipeline.graph.dag orders the stages). Validated per stage later.
    stages: dict[str, dict[str, Any] | None] = Field(
        min_length=1,
        description="The stages to run: stage name -> its parameters (sections below); `{}` or null takes the defaults. "
        "Key order does not matter: stages run in dependency order.",
    )

    _paths = field_validator("cache_dir", "repository", "run_dir")(resolve_path)
    # The config file's directory: a stage's own relative paths resolve against it when
    # another stage reads its params (pipeline/graph/facts.py).
    _base_dir: Path | None = PrivateAttr(None)

    def model_post_init(self, context: Any) -> None:
        base = (context or {}).get("base_dir") if isinstance(context, dict) else None
        self._base_dir = Path(base) if base is not None else None

    @property
    def base_dir(self) -> Path | None:
        return self._base_dir

    def input(self, name: str) -> InputSpec:
        return next(spec for spec in self.inputs if spec.name == name)

    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    def batch_range(self) -> tuple[int, int, int] | None:
        """(min, opt, max) of the batch dim, or None when the model is not batched."""
        if self.batch_dim is None:
            return None
        first = self.inputs[0]
        return first.min[0], first.opt[0], first.max[0]
